package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// httpError is an error with the status and message the user sees.
type httpError struct {
	status int
	msg    string
	// field names the form or query field at fault, when one is.
	field string
}

func (e *httpError) Error() string { return e.msg }

// fieldError is a 400 about one field of a form or query.
func fieldError(field, format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), field: field}
}

// inField attributes an httpError to field; other errors pass through.
func inField(field string, err error) error {
	var he *httpError
	if errors.As(err, &he) && he.field == "" {
		c := *he
		c.field = field
		return &c
	}
	return err
}

// badRequest is a 400 naming what was wrong with the request.
func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// notFound is a 404 naming what was not found.
func notFound(format string, args ...any) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps an error to the status and message the user sees. It is
// the one place typed errors become HTTP statuses; only the 5xx ones are
// logged, by the callers.
func statusOf(err error) (int, string) {
	var he *httpError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit)
	case errors.Is(err, engine.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, engine.ErrInvalidState), errors.Is(err, engine.ErrScheduleExists):
		return http.StatusConflict, err.Error()
	case errors.Is(err, engine.ErrInputTooLarge):
		return http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, engine.ErrInvalidInput):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, store.ErrInvalidValue): // the store's backstop: a value PostgreSQL cannot take
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, engine.ErrUnknownWorkflow), errors.Is(err, engine.ErrInvalidSchedule), errors.Is(err, engine.ErrInvalidConfig):
		return http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, engine.ErrShutdown), errors.Is(err, engine.ErrNotStarted):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.Canceled):
		return 499, "request cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the database took too long to answer"
	}
	return http.StatusInternalServerError, "internal error"
}

func (s *Server) logFailure(r *http.Request, status int, err error) {
	if status >= 500 && status != 499 {
		attrs := []any{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.String("error", err.Error())}
		if s.replica != nil { // say which pool failed
			attrs = append(attrs, slog.String("pool", s.poolOf(r.Context())))
		}
		s.log.ErrorContext(r.Context(), "request failed", attrs...)
	} else if errors.Is(err, store.ErrDataException) {
		// A value the checks let through and PostgreSQL refused: the user
		// gets a 400, but validation has a gap worth knowing about.
		s.log.WarnContext(r.Context(), "request refused by the database", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.String("error", err.Error()))
	}
}

// fail answers a page request with an error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := statusOf(err)
	s.logFailure(r, status, err)
	if strings.HasPrefix(r.URL.Path, "/fragments/") {
		http.Error(w, msg, status)
		return
	}
	back := ""
	if isWrite(r) {
		back = refererPath(r, "/")
	}
	s.render(w, r, status, templates.ErrorPage(templates.ErrorView{
		Page: s.page(nil, r, http.StatusText(status), ""), Status: status, Message: msg, Back: back}))
}

// apiFail answers an API request with {"error": message}.
func (s *Server) apiFail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := statusOf(err)
	s.logFailure(r, status, err)
	writeJSON(w, status, map[string]string{"error": msg})
}

// render writes a component with status, buffered so that a rendering
// error still yields a clean 500.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		s.log.ErrorContext(r.Context(), "render", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

const flashCookie = "cairn_flash"

type flashMsg struct {
	E bool   `json:"e,omitempty"`
	M string `json:"m"`
}

// setFlash stores a one-time message shown by the next page.
func setFlash(w http.ResponseWriter, r *http.Request, isErr bool, msg string) {
	b, _ := json.Marshal(flashMsg{E: isErr, M: msg})
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/",
		MaxAge: 60, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// takeFlash reads and clears the flash message.
func takeFlash(w http.ResponseWriter, r *http.Request) *templates.Flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return nil
	}
	var f flashMsg
	if json.Unmarshal(b, &f) != nil || f.M == "" {
		return nil
	}
	return &templates.Flash{Error: f.E, Message: f.M}
}

// refererPath returns the path of a same-site Referer, else def.
func refererPath(r *http.Request, def string) string {
	ref := r.Referer()
	if ref == "" {
		return def
	}
	u, err := url.Parse(ref)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return def
	}
	return localPath(u.RequestURI(), def)
}

// notFoundAs turns store.ErrNotFound into a 404 with a message naming
// what is missing; other errors pass through.
func notFoundAs(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return notFound(format, args...)
	}
	return err
}
