// Package web serves Cairn's admin site: HTML pages rendered with the templ
// components of package templates, a JSON API under /api/, live updates
// over a websocket (/ws) and Prometheus metrics (/metrics). It depends
// on two interfaces it declares: Reads, every query it reads with, and
// Engine, the live events and every action. An embedder passes its
// *engine.Engine as Engine and store.New(db, schema) (a *store.Store, in
// the engine's schema) as Reads; a second store over a read replica's
// pool can answer the reads of GET requests (Config.ReplicaReads). The
// site never writes through Reads: every change goes through Engine.
package web

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine"
)

// Engine is what the site needs of *engine.Engine: the events it shows
// live and the actions it offers.
type Engine interface {
	Subscribe(buffer int) (<-chan engine.Event, func())
	// SubscribeLogs announces the tasks with new live log lines.
	SubscribeLogs(buffer int) (<-chan engine.LogNote, func())
	WaitRun(ctx context.Context, runID int64) (*engine.RunResult, error)
	Enqueue(ctx context.Context, workflow string, input any, opts ...engine.EnqueueOption) (*engine.Run, error)
	CancelRun(ctx context.Context, runID int64) error
	RetryRun(ctx context.Context, runID int64) error
	CancelRuns(ctx context.Context, runIDs []int64) (engine.BulkResult, error)
	RetryRuns(ctx context.Context, runIDs []int64) (engine.BulkResult, error)
	RequeueRuns(ctx context.Context, runIDs []int64) (engine.BulkResult, error)
	DeleteRuns(ctx context.Context, runIDs []int64) (engine.BulkResult, error)
	CancelTask(ctx context.Context, taskID int64) error
	PauseRun(ctx context.Context, runID int64) error
	ResumeRun(ctx context.Context, runID int64) error
	RetryTask(ctx context.Context, taskID int64) error
	RequeueTask(ctx context.Context, taskID int64) error
	SendSignal(ctx context.Context, taskID int64, name string, payload any) error
	// UseCallback delivers a callback URL's payload (see callbacks.go).
	UseCallback(ctx context.Context, token string, payload json.RawMessage) (int64, error)
	Signal(ctx context.Context, taskID int64) error
	PauseQueue(ctx context.Context, queue string) error
	ResumeQueue(ctx context.Context, queue string) error
	SetQueueCap(ctx context.Context, queue string, maxRunning *int) error
	PauseSchedule(ctx context.Context, name string) error
	ResumeSchedule(ctx context.Context, name string) error
	FireSchedule(ctx context.Context, name string) (*engine.Run, error)
	RerunFrom(ctx context.Context, runID int64, task string, opts ...engine.RerunOption) (*engine.Run, error)
	Workflows() []string
	WorkflowDefs() []engine.WorkflowDef
	CreateSchedule(ctx context.Context, s engine.Schedule) error
	UpdateSchedule(ctx context.Context, s engine.Schedule) error
	DeleteSchedule(ctx context.Context, name string) error
	// LastCheck says when the DeferUntil condition of a task this process
	// holds was last checked; false when it does not hold the task (the
	// task page then says "not known here").
	LastCheck(taskID int64) (time.Time, bool)
}

// DefaultSessionTTL is how long a login lasts unless Config.SessionTTL says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// DefaultHeldHorizon is how long a transaction or a connected replication
// slot holds back vacuum before Needs attention shows it, unless
// Config.HeldHorizon says otherwise. The engine's horizon watch warns
// after the same minute.
const DefaultHeldHorizon = time.Minute

// BulkLimit caps how many runs one bulk action touches (the newest ones
// matching the filter); repeat the action for the rest.
const BulkLimit = 1000

// ErrInsecureConfig is returned by New for a configuration that would
// expose the site without a password.
var ErrInsecureConfig = errors.New("insecure web config")

// Config configures a Server.
type Config struct {
	// Engine performs the actions and provides live events. Required.
	Engine Engine
	// Reads answers the read queries: store.New(db, schema) over the
	// engine's database and schema. Required.
	Reads Reads
	// ReplicaReads, when set, answers the reads of GET and HEAD requests
	// (pages, fragments, GET /api/..., the overview's and /metrics'
	// counts): store.New over a read replica's pool, in the same schema
	// as Reads. Reads still answers the reads of writes (bulk action
	// filters), the page right after a form action (the one showing its
	// flash message) and a run or task the replica has not replayed yet.
	// The replica may lag: live pages catch up on the next event or
	// periodic refresh. Defaults to nil: Reads answers every read.
	ReplicaReads Reads
	// Logger receives request errors and hub events. Defaults to a logger
	// that discards.
	Logger *slog.Logger
	// AdminPassword enables the login; the admin may do everything.
	// Without it the site is served only on a loopback ListenAddr, where
	// everyone is admin. Defaults to "" (no login).
	AdminPassword string
	// ReadonlyPassword logs in a read-only user who sees everything and
	// may change nothing. Needs AdminPassword. Defaults to "" (none).
	ReadonlyPassword string
	// SessionSecret signs session cookies and CSRF tokens. Give every
	// replica behind one address the same secret (32+ random bytes).
	// Defaults to random bytes: sessions end when the process restarts.
	SessionSecret []byte
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// ListenAddr is the address the site is served on (host:port). It
	// decides whether running without a password is allowed. Required.
	ListenAddr string
	// AllowedOrigins lists extra origins ("https://cairn.example.com")
	// accepted on state-changing requests and websockets, for a site
	// served behind a proxy that rewrites Host. Defaults to none: the
	// Origin must match the Host header.
	AllowedOrigins []string
	// Clock returns the current time. Defaults to time.Now.
	Clock func() time.Time
	// HeldHorizon is how long a transaction or a connected replication
	// slot must have held back vacuum (the database's xmin horizon)
	// before Needs attention, on the overview and in /api/overview, shows
	// it, naming the holder: a session's pid, application and state and
	// how long it has been in its transaction, or the slot's name. Shorter
	// holds are the ordinary life of a busy database. A slot no standby is
	// connected to is shown at once. Defaults to 60s.
	HeldHorizon time.Duration
	// TracerProvider, when set, makes a span of every request
	// (OpenTelemetry; give it the engine's provider). Defaults to nil: no
	// spans.
	TracerProvider trace.TracerProvider
}

// Server is the admin site. Create it with New, serve Handler, and run Run
// for live updates.
type Server struct {
	eng     Engine
	st      Reads // the primary: reads of writes, and every read without a replica
	replica Reads // Config.ReplicaReads; nil: none
	// heldHorizon is how long a transaction or a connected slot holds
	// back vacuum before Needs attention shows it (Config.HeldHorizon).
	heldHorizon time.Duration
	log         *slog.Logger
	clock       func() time.Time
	auth        *auth
	logins      *loginLimiter
	origins     map[string]bool
	hub         *hub
	handler     http.Handler
	registry    *prometheus.Registry
	cache       *statsCache
	// readRequests counts read requests by pool.
	readRequests *prometheus.CounterVec
	// patterns are the routes' patterns, in registration order.
	patterns []string
}

// New validates cfg and returns a server. It fails with ErrInsecureConfig
// when no AdminPassword is set and ListenAddr is not a loopback address.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("web: Config.Engine is required")
	}
	if cfg.Reads == nil {
		return nil, errors.New("web: Config.Reads is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < 0 {
		return nil, errors.New("web: Config.SessionTTL must not be negative")
	}
	if cfg.HeldHorizon < 0 {
		return nil, errors.New("web: Config.HeldHorizon must not be negative")
	}
	if cfg.AdminPassword == "" {
		if cfg.ReadonlyPassword != "" {
			return nil, fmt.Errorf("%w: ReadonlyPassword needs AdminPassword", ErrInsecureConfig)
		}
		if !IsLoopback(cfg.ListenAddr) {
			return nil, fmt.Errorf("%w: no AdminPassword and ListenAddr %q is not a loopback address: set an admin password or listen on 127.0.0.1, ::1 or localhost",
				ErrInsecureConfig, cfg.ListenAddr)
		}
	} else if cfg.ReadonlyPassword == cfg.AdminPassword {
		return nil, fmt.Errorf("%w: ReadonlyPassword must differ from AdminPassword", ErrInsecureConfig)
	}
	secret := cfg.SessionSecret
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("web: session secret: %w", err)
		}
	} else if len(secret) < 16 {
		return nil, fmt.Errorf("%w: SessionSecret must be at least 16 bytes", ErrInsecureConfig)
	}
	origins := map[string]bool{}
	for _, o := range cfg.AllowedOrigins {
		origins[strings.ToLower(strings.TrimRight(o, "/"))] = true
	}
	s := &Server{
		eng:         cfg.Engine,
		st:          cfg.Reads,
		replica:     cfg.ReplicaReads,
		heldHorizon: cmp.Or(cfg.HeldHorizon, DefaultHeldHorizon),
		log:         cfg.Logger,
		clock:       cfg.Clock,
		origins:     origins,
		auth:        newAuth(secret, cfg.AdminPassword, cfg.ReadonlyPassword, cfg.SessionTTL, cfg.Clock),
		logins:      &loginLimiter{clock: cfg.Clock},
	}
	s.cache = &statsCache{st: cmp.Or(cfg.ReplicaReads, cfg.Reads), primary: cfg.Reads, clock: cfg.Clock, ttl: statsTTL}
	s.hub = newHub(cfg.Engine, cfg.Logger)
	s.registry = prometheus.NewRegistry()
	if err := s.registry.Register(&taskCollector{cache: s.cache, log: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("web: register metrics: %w", err)
	}
	s.readRequests = newReadRequests(cfg.ReplicaReads != nil)
	if err := s.registry.Register(s.readRequests); err != nil {
		return nil, fmt.Errorf("web: register metrics: %w", err)
	}
	s.handler = traced(cfg.TracerProvider, s.routes())
	return s, nil
}

// IsLoopback reports whether addr (host:port, or a bare host) names only
// loopback interfaces: 127.0.0.0/8, ::1 or localhost. An empty host
// (":8080") listens everywhere and is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler returns the site's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Run subscribes to the engine's events and fans them out to websocket
// clients until ctx ends; then it closes every client. Serve Handler
// alongside it.
func (s *Server) Run(ctx context.Context) error { return s.hub.run(ctx) }

func (s *Server) routes() http.Handler {
	mux := &routeMux{ServeMux: http.NewServeMux()}
	// Public.
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	// Callback URLs: the token is the permission (callbacks.go).
	mux.HandleFunc("GET "+callbackPrefix+"{token}", s.callbackGet)
	mux.HandleFunc("POST "+callbackPrefix+"{token}", s.callbackPost)

	// Pages.
	mux.HandleFunc("GET /{$}", s.overviewPage)
	mux.HandleFunc("GET /runs", s.runsPage)
	mux.HandleFunc("GET /runs/{id}", s.runPage)
	mux.HandleFunc("GET /workflows", s.workflowsPage)
	mux.HandleFunc("GET /tasks/{id}", s.taskPage)
	mux.HandleFunc("GET /workers", s.workersPage)
	mux.HandleFunc("GET /queues", s.queuesPage)
	mux.HandleFunc("GET /schedules", s.schedulesPage)
	mux.HandleFunc("GET /schedules/new", s.scheduleNewPage)
	mux.HandleFunc("GET /schedules/{name}/edit", s.scheduleEditPage)

	// Fragments the live script re-fetches.
	mux.HandleFunc("GET /fragments/overview", s.overviewFragment)
	mux.HandleFunc("GET /fragments/runs", s.runsFragment)
	mux.HandleFunc("GET /fragments/runs/{id}", s.runFragment)
	mux.HandleFunc("GET /fragments/tasks/{id}", s.taskFragment)
	mux.HandleFunc("GET /fragments/tasks/{id}/log", s.taskLogFragment)
	mux.HandleFunc("GET /fragments/workers", s.workersFragment)
	mux.HandleFunc("GET /fragments/queues", s.queuesFragment)
	mux.HandleFunc("GET /fragments/workflows", s.workflowsFragment)
	mux.HandleFunc("GET /fragments/schedules/preview", s.schedulePreviewFragment)

	// Form actions.
	mux.HandleFunc("POST /runs", s.enqueueForm)
	mux.HandleFunc("POST /runs/bulk", s.bulkForm)
	mux.HandleFunc("POST /schedules", s.scheduleCreateForm)
	mux.HandleFunc("POST /schedules/{name}", s.scheduleUpdateForm)
	mux.HandleFunc("POST /schedules/{name}/delete", s.scheduleDeleteForm)
	mux.HandleFunc("POST /tasks/{id}/signal", s.signalFormPost)
	mux.HandleFunc("POST /tasks/{id}/rerun", s.rerunForm)
	for _, a := range actions {
		mux.HandleFunc("POST "+a.path, s.actionForm(a))
	}

	// JSON API.
	mux.HandleFunc("GET "+openAPIPath, serveOpenAPI)
	mux.HandleFunc("GET /api/overview", s.apiOverview)
	mux.HandleFunc("GET /api/workflows", s.apiWorkflows)
	mux.HandleFunc("GET /api/workflows/{name}", s.apiWorkflow)
	mux.HandleFunc("GET /api/runs", s.apiRuns)
	mux.HandleFunc("POST /api/runs", s.apiEnqueue)
	mux.HandleFunc("POST /api/runs/bulk", s.apiBulk)
	// Without this, GET /api/runs/bulk would match /api/runs/{id} and get
	// a 400 for the id "bulk".
	mux.HandleFunc("GET /api/runs/bulk", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		s.apiFail(w, r, &httpError{status: http.StatusMethodNotAllowed,
			msg: fmt.Sprintf("%s is not allowed on %s: use POST", r.Method, r.URL.Path)})
	})
	mux.HandleFunc("GET /api/runs/{id}", s.apiRun)
	mux.HandleFunc("GET /api/tasks/{id}", s.apiTask)
	mux.HandleFunc("GET /api/tasks/{id}/log", s.apiTaskLog)
	mux.HandleFunc("GET /api/workers", s.apiWorkers)
	mux.HandleFunc("GET /api/queues", s.apiQueues)
	mux.HandleFunc("GET /api/schedules", s.apiSchedules)
	mux.HandleFunc("POST /api/tasks/{id}/signal", s.apiSignal)
	mux.HandleFunc("POST /api/runs/{id}/rerun", s.apiRerun)
	mux.HandleFunc("POST /api/schedules", s.apiScheduleCreate)
	mux.HandleFunc("PUT /api/schedules/{name}", s.apiScheduleUpdate)
	mux.HandleFunc("DELETE /api/schedules/{name}", s.apiScheduleDelete)
	for _, a := range actions {
		mux.HandleFunc("POST /api"+a.path, s.actionAPI(a))
	}
	mux.HandleFunc(apiCatchAll, func(w http.ResponseWriter, r *http.Request) {
		if err := methodNotAllowed(w, mux.ServeMux, r); err != nil {
			s.apiFail(w, r, err)
			return
		}
		s.apiFail(w, r, &httpError{status: http.StatusNotFound, msg: "no such API endpoint: " + r.Method + " " + r.URL.Path})
	})

	mux.HandleFunc("GET /ws", s.websocket)
	mux.Handle("GET /metrics", s.metricsHandler())

	mux.HandleFunc(pageCatchAll, func(w http.ResponseWriter, r *http.Request) {
		if err := methodNotAllowed(w, mux.ServeMux, r); err != nil {
			s.fail(w, r, err)
			return
		}
		s.fail(w, r, &httpError{status: http.StatusNotFound, msg: "no such page: " + r.URL.Path})
	})
	s.patterns = mux.patterns
	return routeTagged(mux.ServeMux, s.recoverer(securityHeaders(s.authenticate(s.refuseBadText(s.pickReads(s.guardWrites(mux.ServeMux)))))))
}

// The patterns that answer every request no other route takes: with a
// 405 when the path has routes for other methods, else a 404. They
// change nothing.
const (
	apiCatchAll  = "/api/"
	pageCatchAll = "/"
)

// routeMethods are the methods probed for an Allow header.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// isCatchAll reports whether mux sends r to one of the catch-all routes.
func isCatchAll(mux *http.ServeMux, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	return pattern == apiCatchAll || pattern == pageCatchAll
}

// allowedMethods lists the methods that have a route for r's path.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range routeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if !isCatchAll(mux, probe) {
			allow = append(allow, m)
		}
	}
	return allow
}

// methodNotAllowed sets the Allow header and returns a 405 when r's path
// has routes for other methods; else it returns nil.
func methodNotAllowed(w http.ResponseWriter, mux *http.ServeMux, r *http.Request) error {
	allow := allowedMethods(mux, r)
	if len(allow) == 0 {
		return nil
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return &httpError{status: http.StatusMethodNotAllowed,
		msg: fmt.Sprintf("%s is not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))}
}

// healthz answers "ok" when the database answers. With a read replica it
// checks both pools and adds a line for each, with the replica's
// replication state; either one down is a 503.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.st.DatabasePing(ctx); err != nil {
		s.log.WarnContext(ctx, "health check: database unavailable", slog.String("pool", poolPrimary), slog.String("error", err.Error()))
		http.Error(w, "database unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.replica == nil {
		_, _ = w.Write([]byte("ok"))
		return
	}
	rs, err := s.replica.ReplicaStatusGet(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "health check: read replica unavailable", slog.String("pool", poolReplica), slog.String("error", err.Error()))
		http.Error(w, "primary: ok\nreplica: unavailable", http.StatusServiceUnavailable)
		return
	}
	state := "not in recovery (a primary)"
	if rs.InRecovery {
		state = "in recovery"
		if rs.ReplayPaused {
			state += ", replay paused"
		}
		if rs.SinceReplay > 0 {
			state += fmt.Sprintf(", last replayed transaction %s ago", rs.SinceReplay.Round(time.Millisecond))
		}
	}
	_, _ = fmt.Fprintf(w, "ok\nprimary: ok\nreplica: ok, %s\n", state)
}

// recoverer turns a handler panic into a 500 and a log line.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic serving request", slog.String("path", r.URL.Path), slog.Any("panic", v))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

var hostRe = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// securityHeaders sets a strict content security policy (same origin only,
// no inline script or style) and the usual hardening headers.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		connect := "'self'"
		if hostRe.MatchString(r.Host) { // older browsers need ws: and wss: spelled out
			connect += " ws://" + r.Host + " wss://" + r.Host
		}
		csp := "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
			"; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}
