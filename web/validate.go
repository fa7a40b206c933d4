package web

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// Hostile input: every query parameter, form field and path is checked
// for text PostgreSQL cannot take (a NUL byte, invalid UTF-8) before any
// handler runs (checkText); names are also checked for control
// characters (checkName) and numbers for the range of their column, by
// the handlers that read them. Invalid bytes are refused, never replaced.

// refuseBadText answers 400, naming the parameter, for a request whose
// path, query parameters or form fields are not text PostgreSQL can
// store.
func (s *Server) refuseBadText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := requestTextErr(w, r); err != nil {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				s.apiFail(w, r, err)
			} else {
				s.fail(w, r, err)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

func requestTextErr(w http.ResponseWriter, r *http.Request) error {
	if err := check.Text(r.URL.Path); err != nil {
		return badRequest("path %q: %v", r.URL.Path, err)
	}
	if err := checkValues("query parameter", r.URL.Query()); err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method == http.MethodPost && mt == "application/x-www-form-urlencoded" {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			return badRequest("bad form: %v", err)
		}
		return checkValues("form field", r.PostForm)
	}
	return nil
}

func checkValues(what string, vs url.Values) error {
	for k, list := range vs {
		if err := check.Text(k); err != nil {
			return badRequest("%s name %q: %v", what, k, err)
		}
		for _, v := range list {
			if err := check.Text(v); err != nil {
				return badRequest("%s %s: %v", what, k, err)
			}
		}
	}
	return nil
}

// checkText returns a 400 naming field unless v is text PostgreSQL can
// store (check.Text).
func checkText(field, v string) error {
	if err := check.Text(v); err != nil {
		return badRequest("%s: %v", field, err)
	}
	return nil
}

// checkName returns a 400 naming field unless v is a label where a name
// is looked for (check.Label): text without control characters, at most
// 200 bytes. What goes to the engine is checked there.
func checkName(field, v string) error {
	if err := check.Label(v); err != nil {
		return badRequest("%s: %v", field, err)
	}
	return nil
}

// checkJSONBody returns a 400 naming the top-level field whose value
// PostgreSQL could not take as jsonb (a \u0000 escape, a lone surrogate
// escape, which Go would decode as U+FFFD, or a number beyond numeric's
// range), or nil. body has been decoded already.
func checkJSONBody(body []byte) error {
	err := store.CheckJSON(body)
	if err == nil {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) == nil {
		for k, v := range fields {
			if ferr := store.CheckJSON(v); ferr != nil {
				return badRequest("%s: %v", k, ferr)
			}
		}
	}
	return badRequest("bad JSON body: %v", err)
}
