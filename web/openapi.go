package web

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIPath serves the OpenAPI document of the JSON API.
const openAPIPath = "/api/openapi.json"

// openAPIDoc is the OpenAPI 3.1 document of the JSON API, written by
// hand. The web package's tests validate
// every API request they make and every answer they get against it, and
// hold its operations against the registered routes.
//
//go:embed openapi.json
var openAPIDoc []byte

// serveOpenAPI serves the document. It needs no login: it is the same for
// every deployment, holds no data, and lets a client read the contract
// before it has credentials.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
	_, _ = w.Write(openAPIDoc)
}

// routeMux is a ServeMux that remembers the patterns it was given, so
// that tests can hold the routes against the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

// Handle registers handler for pattern.
func (m *routeMux) Handle(pattern string, handler http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, handler)
}

// HandleFunc registers handler for pattern.
func (m *routeMux) HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, handler)
}
