package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/cairnhq/cairn/engine"
)

// Callback URLs (TaskHandle.CallbackURL): /callbacks/{token} is a
// capability URL, served without login, session or CSRF token: holding
// the token is the permission. POST delivers its body as the task's
// signal once (Engine.UseCallback); GET shows a page whose button POSTs,
// so that a link opened in a browser (or fetched by a mail scanner)
// changes nothing by itself. Every use is logged with the caller's
// address (the connection's: the site has no trusted-proxy setting, so
// X-Forwarded-For is not believed).

// callbackPrefix starts the path of every callback URL.
const callbackPrefix = "/callbacks/"

// maxCallbackBody caps a callback's body, as the API's JSON bodies; the
// engine then holds the payload to Config.MaxInputBytes.
const maxCallbackBody = 2 << 20

// isCallback reports whether path is a callback URL's.
func isCallback(path string) bool { return strings.HasPrefix(path, callbackPrefix) }

// callbackView is what the callback page shows.
type callbackView struct {
	Payload string // the form's payload (GET)
	Message string // the outcome (a form POST)
}

var callbackPage = template.Must(template.New("callback").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>Cairn callback</title><meta name="referrer" content="no-referrer"></head>
<body><main>
{{if .Message}}<p>{{.Message}}</p>{{else}}<h1>Send this callback</h1>
<p>Sending delivers the payload below, once, to the task waiting for it.</p>
<form method="post"><label>Payload (JSON)<br><textarea name="payload" rows="6" cols="60">{{.Payload}}</textarea></label>
<p><button type="submit">Send</button></p></form>{{end}}
</main></body></html>
`))

func (s *Server) renderCallback(w http.ResponseWriter, status int, v callbackView) {
	var buf bytes.Buffer
	if err := callbackPage.Execute(&buf, v); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// callbackGet shows the confirmation page: a form that POSTs the payload
// given as ?payload= (when it is JSON; else null). It looks nothing up,
// so it says nothing about the token.
func (s *Server) callbackGet(w http.ResponseWriter, r *http.Request) {
	payload := strings.TrimSpace(r.URL.Query().Get("payload"))
	if payload == "" || !json.Valid([]byte(payload)) {
		payload = "null"
	}
	s.renderCallback(w, http.StatusOK, callbackView{Payload: payload})
}

// callbackPost delivers a callback: its body (a JSON value; empty is
// null), or the payload field of the confirmation page's form. 200 once
// delivered; 400 for a body that is not JSON; 413 for one too large; 403
// for an unknown (forged) or expired token; 410 for a token used already
// or whose task moved on. A refused callback changes nothing. The answer
// is JSON, or the page for a form.
func (s *Server) callbackPost(w http.ResponseWriter, r *http.Request) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	form := mt == "application/x-www-form-urlencoded"
	addr := remoteIP(r)
	var payload []byte
	var err error
	if form {
		payload = []byte(strings.TrimSpace(r.PostFormValue("payload")))
	} else if payload, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallbackBody)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = &httpError{status: http.StatusRequestEntityTooLarge, msg: "callback body: larger than the limit"}
		} else {
			err = badRequest("could not read the request body")
		}
	}
	payload = bytes.TrimSpace(payload)
	if err == nil && len(payload) > 0 && !json.Valid(payload) {
		err = badRequest("callback body: not valid JSON")
	}
	var task int64
	if err == nil {
		ctx := engine.WithActor(r.Context(), engine.Actor{Name: "callback", Addr: addr})
		task, err = s.eng.UseCallback(ctx, r.PathValue("token"), payload)
	}
	status, msg := http.StatusOK, "Delivered."
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrNotFound):
		status, msg = http.StatusForbidden, "This callback URL is unknown or has expired."
	case errors.Is(err, engine.ErrInvalidState):
		status, msg = http.StatusGone, "This callback URL was used already, or its task has moved on."
	case errors.Is(err, engine.ErrInputTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, engine.ErrInvalidInput):
		status, msg = http.StatusBadRequest, err.Error()
	default:
		status, msg = statusOf(err)
	}
	attrs := []any{slog.String("remote", addr), slog.Int("status", status)}
	if task != 0 {
		attrs = append(attrs, slog.Int64("task", task))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.Log(r.Context(), level, "callback", attrs...)
	switch {
	case form:
		s.renderCallback(w, status, callbackView{Message: msg})
	case err != nil:
		writeJSON(w, status, map[string]string{"error": msg})
	default:
		writeJSON(w, status, map[string]any{"ok": true, "message": msg})
	}
}
