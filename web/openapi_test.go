package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/web"
)

// The OpenAPI contract test. Every test server of this package
// (setup, quietEnv) serves its handler through checkContract, which
// validates each request to a documented path and its answer against
// openapi.json with kin-openapi, and fails the test that made the request
// on a mismatch:
//   - a request the document accepts must get an answer the document
//     lists for its operation: a documented status, the documented
//     content type, a body that validates against the schema (kin-openapi
//     validates OpenAPI 3.1 documents with JSON Schema 2020-12, so type
//     arrays such as ["integer", "null"], const, propertyNames and
//     unevaluatedProperties all bite);
//   - a request the document refuses (a bad parameter or body), or one to
//     a path or method it does not have, must get a 4xx answer with the
//     error shape (#/components/schemas/Error);
//
// TestMain fails a full run of the package in which a documented
// operation never got a 2xx answer, and TestOpenAPIMatchesRoutes holds
// the document's operations against the routes the server registers.

// contract is the OpenAPI document, loaded and validated once.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// errSchema is the error shape every 4xx answer has.
	errSchema *openapi3.Schema

	mu sync.Mutex
	// ok counts the 2xx answers to each operation ("GET /api/runs/{id}").
	ok map[string]int
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		return nil, err
	}
	// The callback URLs' page (/callbacks/{token}) answers HTML.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.json: %w", err)
	}
	es := doc.Components.Schemas["Error"]
	if es == nil || es.Value == nil {
		return nil, fmt.Errorf("openapi.json has no #/components/schemas/Error")
	}
	return &contract{doc: doc, router: router, errSchema: es.Value, ok: map[string]int{}}, nil
})

// mustContract returns the contract or fails t.
func mustContract(t testing.TB) *contract {
	t.Helper()
	c, err := loadContract()
	require.NoError(t, err)
	return c
}

// documented reports whether the document speaks of path.
func documented(path string) bool {
	return strings.HasPrefix(path, "/api/") || path == "/healthz" || path == "/metrics" || strings.HasPrefix(path, "/callbacks/")
}

// contractLog collects the mismatches found while serving one test.
type contractLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *contractLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

func (l *contractLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	return errs
}

// checkContract serves next, validating every request to a documented
// path and its answer against the document. The mismatches fail t when
// its cleanups run: register it before the cleanup that closes the
// server, so that it runs after every request has finished. (The
// handler's goroutines may not call a *testing.F's Errorf.)
func checkContract(t testing.TB, next http.Handler) http.Handler {
	t.Helper()
	c := mustContract(t)
	log := &contractLog{}
	t.Cleanup(func() {
		for _, e := range log.take() {
			t.Errorf("OpenAPI contract: %s", e)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !documented(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			log.add("%s %s: read the request body: %v", r.Method, r.URL, err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		vr := r.Clone(context.Background())
		vr.Body = io.NopCloser(bytes.NewReader(body))
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		if msg := c.check(vr, rec); msg != "" {
			log.add("%s %s answered %d %s: %s", r.Method, r.URL, rec.Code, clip(rec.Body.String(), 300), msg)
		} else {
			c.exercised(vr, rec.Code)
		}
	})
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// check validates one exchange; it returns what is wrong, or "".
func (c *contract) check(req *http.Request, rec *httptest.ResponseRecorder) string {
	ctx := context.Background()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return c.checkRefusal(req, rec, "no such operation in the document ("+err.Error()+")")
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		return c.checkRefusal(req, rec, "the document refuses the request ("+err.Error()+")")
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return "the answer does not match the document: " + err.Error()
	}
	return ""
}

// exercised records a 2xx answer to the operation of req.
func (c *contract) exercised(req *http.Request, status int) {
	route, _, err := c.router.FindRoute(req)
	if err != nil || status < 200 || status >= 300 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ok[route.Method+" "+route.Path]++
}

// checkRefusal checks the answer to a request outside the document: a
// 4xx, with the error shape on the API.
func (c *contract) checkRefusal(req *http.Request, rec *httptest.ResponseRecorder, why string) string {
	if unclean(req.URL.Path) && (rec.Code == http.StatusMovedPermanently || rec.Code == http.StatusTemporaryRedirect) {
		return "" // net/http redirects to the clean path first
	}
	if rec.Code < 400 || rec.Code >= 500 {
		return why + ", yet it was not refused with a 4xx"
	}
	if !strings.HasPrefix(req.URL.Path, "/api/") {
		return "" // an error page
	}
	if mt, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type")); mt != "application/json" {
		return why + ": the refusal is " + mt + ", not application/json"
	}
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return why + ": the refusal is not JSON: " + err.Error()
	}
	if err := c.errSchema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return why + ": the refusal is not the error shape: " + err.Error()
	}
	return ""
}

// unclean reports whether http.ServeMux would redirect p to a cleaner
// path ("//", "." or ".." segments).
func unclean(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c != p
}

// operations lists the document's operations ("GET /api/runs/{id}").
func (c *contract) operations() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// unexercised lists the operations no test got a 2xx answer from.
func (c *contract) unexercised() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, op := range c.operations() {
		if c.ok[op] == 0 {
			out = append(out, op)
		}
	}
	return out
}

// checkOpenAPICoverage runs after the package's tests (TestMain): when
// they all ran and passed, every documented operation must have answered
// one of them with a 2xx. It returns the exit code.
func checkOpenAPICoverage() int {
	for _, name := range []string{"test.run", "test.skip", "test.fuzz"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return 0 // a partial run
		}
	}
	c, err := loadContract()
	if err != nil {
		fmt.Fprintln(os.Stderr, "OpenAPI contract:", err)
		return 1
	}
	if missing := c.unexercised(); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "OpenAPI contract: no test got a 2xx answer from these documented operations:\n\t%s\n",
			strings.Join(missing, "\n\t"))
		return 1
	}
	return 0
}

// TestOpenAPIDocument loads and validates the document with kin-openapi
// and checks that the server serves it, without login.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	require.Equal(t, "3.1.0", c.doc.OpenAPI)
	require.True(t, c.doc.IsOpenAPI31OrLater())
	require.NotEmpty(t, c.doc.Components.SecuritySchemes["basicAuth"])
	require.NotEmpty(t, c.doc.Components.SecuritySchemes["sessionCookie"])

	e := setup(t, nil)
	want, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	res, body := e.client(t).get("/api/openapi.json") // no login
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	require.Equal(t, string(want), body)

	// The rest of the API still needs the login.
	res, body = e.client(t).get("/api/runs")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
}

// TestOpenAPIMatchesRoutes holds the document's operations against the
// routes the server registers: every /api/ route is a documented
// operation and every operation is a route. Two /api/ routes are not
// operations: the catch-all "/api/" (404 or 405) and GET /api/runs/bulk,
// a 405 that the document shows as a path without GET.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	e := setup(t, nil)

	var routes []string
	for _, p := range web.RoutePatterns(e.srv) {
		method, path, ok := strings.Cut(p, " ")
		if !ok || !documented(path) {
			continue
		}
		switch p {
		case "GET /api/runs/bulk":
			item := c.doc.Paths.Value(path)
			require.NotNil(t, item, "the document has no path %s", path)
			require.Nil(t, item.GetOperation(method), "%s answers 405: the document must not offer it", p)
			continue
		}
		routes = append(routes, method+" "+path)
	}
	slices.Sort(routes)
	require.Equal(t, c.operations(), routes, "the document's operations (want) and the server's routes (got) differ")
}

// runJSON is a run as GET /api/runs/{id} answers it.
const runJSON = `{"id": 1, "workflow": "wf", "status": "pending", "paused": false, "input": {}, "queue": "default", "priority": 0,
	"task_count": 2, "done_tasks": 0, "failed_tasks": 0, "cancelled_tasks": 0, "interrupted_tasks": 0,
	"created_at": "2026-01-02T15:04:05Z", "updated_at": "2026-01-02T15:04:05Z"}`

// TestOpenAPICheckBites feeds the checker answers that break the
// document, so that a checker that lets everything through fails.
func TestOpenAPICheckBites(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	for _, tc := range []struct {
		name, method, target, reqBody string
		status                        int
		ctype, body                   string
		wantErr                       string // "" when the exchange conforms
	}{
		{"conforming list", "GET", "/api/runs", "", 200, "application/json", `{"runs": []}`, ""},
		{"conforming refusal", "GET", "/api/runs?limit=0", "", 400, "application/json", `{"error": "limit \"0\": must be 1 to 500"}`, ""},
		{"conforming 404 off the document", "GET", "/api/nope", "", 404, "application/json", `{"error": "no such API endpoint"}`, ""},
		{"undocumented field", "GET", "/api/runs", "", 200, "application/json", `{"runs": [], "total": 3}`, "does not match"},
		{"conforming run", "GET", "/api/runs/1", "", 200, "application/json", `{"run": ` + runJSON + `, "tasks": [], "after": []}`, ""},
		{"undocumented field of a run (allOf)", "GET", "/api/runs/1", "", 200, "application/json", `{"run": ` + strings.TrimSuffix(runJSON, "}") + `, "extra": 1}, "tasks": [], "after": []}`, "does not match"},
		{"conforming list item (allOf)", "GET", "/api/runs", "", 200, "application/json", `{"runs": [` + strings.TrimSuffix(runJSON, "}") + `, "tasks_done": 0, "tasks_failed": 0, "tasks_active": 0, "tasks_parked": 0, "tasks_ongoing": 2}]}`, ""},
		{"bad enum in a list item (allOf)", "GET", "/api/runs", "", 200, "application/json", `{"runs": [` + strings.TrimSuffix(strings.Replace(runJSON, `"pending"`, `"sleepy"`, 1), "}") + `, "tasks_done": 0, "tasks_failed": 0, "tasks_active": 0, "tasks_parked": 0, "tasks_ongoing": 2}]}`, "does not match"},
		{"missing required field", "GET", "/api/workers", "", 200, "application/json", `{}`, "does not match"},
		{"wrong type", "GET", "/api/runs", "", 200, "application/json", `{"runs": [], "next_cursor": 5}`, "does not match"},
		{"null where not nullable", "GET", "/api/schedules", "", 200, "application/json", `{"schedules": null}`, "does not match"},
		{"undocumented status", "GET", "/api/queues", "", 418, "application/json", `{"error": "teapot"}`, "does not match"},
		{"wrong content type", "GET", "/api/queues", "", 200, "text/html", `<p>queues</p>`, "does not match"},
		{"error without the error shape", "GET", "/api/runs/1", "", 404, "application/json", `{"message": "not found"}`, "does not match"},
		{"bad request answered 2xx", "GET", "/api/runs?limit=0", "", 200, "application/json", `{"runs": []}`, "not refused"},
		{"bad body answered 2xx", "POST", "/api/runs", `{"workflow": "wf", "priority": "high"}`, 201, "application/json", `{"id": 1, "workflow": "wf", "existing": false}`, "not refused"},
		{"refusal off the document not JSON", "DELETE", "/api/runs", "", 405, "text/plain", "no", "not application/json"},
		{"success off the document", "GET", "/api/nope", "", 200, "application/json", `{}`, "not refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.reqBody))
			if tc.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", tc.ctype)
			rec.WriteHeader(tc.status)
			rec.WriteString(tc.body)
			got := c.check(req, rec)
			if tc.wantErr == "" {
				require.Empty(t, got)
			} else {
				require.Contains(t, got, tc.wantErr)
			}
		})
	}
}
