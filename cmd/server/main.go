// Command server runs Cairn's server: it connects to PostgreSQL (or starts
// a private cluster when no database URL is given), applies pending
// migrations and serves HTTP until SIGINT or SIGTERM.
//
// Configuration comes from flags, each with an environment variable as its
// default; see `server -h`.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgcluster"
	"github.com/cairnhq/cairn/web"
)

const (
	defaultAddr    = "127.0.0.1:8080"
	defaultDataDir = ".cairn"

	// pingTimeout bounds the wait for the database at start, so a wrong
	// host fails instead of hanging.
	pingTimeout = 5 * time.Second
	// healthTimeout bounds the database ping of /healthz.
	healthTimeout = 2 * time.Second
	// shutdownTimeout bounds how long open HTTP requests may take to
	// finish once shutdown starts.
	shutdownTimeout = 10 * time.Second
	// readHeaderTimeout bounds how long a client may take to send request
	// headers.
	readHeaderTimeout = 10 * time.Second
)

// config is the server's configuration, from flags and environment.
type config struct {
	addr             string        // listen address; port 0 picks a free port
	databaseURL      string        // empty: start a private cluster in dataDir/pg
	readDatabaseURL  string        // empty: the site reads from databaseURL too
	schema           string        // Postgres schema Cairn lives in
	noMigrate        bool          // do not apply pending migrations at start
	demo             bool          // register and enqueue the demo workflows
	adminPassword    string        // password of the admin login
	readonlyPassword string        // password of the read-only login
	sessionSecret    string        // signs session cookies; share it between replicas
	dataDir          string        // holds the private cluster (dataDir/pg)
	heldHorizon      time.Duration // how long a hold on vacuum is before the site shows it

	logger *slog.Logger // nil: text to stderr

	// otelEnv reads the OTEL_* variables that switch tracing on (see
	// startTracing); nil: no tracing. main passes os.Getenv.
	otelEnv func(string) string
	// tracer is the tracer provider run built from otelEnv; nil: off.
	tracer trace.TracerProvider

	// hardStop, when done, ends the engine's shutdown grace period at once
	// (a second SIGINT/SIGTERM). nil: never.
	hardStop context.Context
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.logger = logger
	cfg.otelEnv = os.Getenv

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hard, hardCancel := context.WithCancel(context.Background())
	defer hardCancel()
	cfg.hardStop = hard
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		logger.Info("shutting down; signal again to cancel running tasks at once", slog.String("signal", sig.String()))
		cancel()
		sig = <-sigs
		logger.Warn("second signal: cancelling running tasks now", slog.String("signal", sig.String()))
		hardCancel()
		sig = <-sigs
		logger.Error("third signal: exiting at once", slog.String("signal", sig.String()))
		os.Exit(1)
	}()

	if err := run(ctx, cfg, nil); err != nil {
		logger.Error("server stopped", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// envFlags names the environment variable behind each flag that has one.
var envFlags = map[string]string{
	"addr":              "CAIRN_ADDR",
	"database-url":      "DATABASE_URL",
	"read-database-url": "CAIRN_READ_DATABASE_URL",
	"schema":            "CAIRN_SCHEMA",
	"admin-password":    "CAIRN_ADMIN_PASSWORD",
	"readonly-password": "CAIRN_READONLY_PASSWORD",
	"session-secret":    "CAIRN_SESSION_SECRET",
	"held-horizon":      "CAIRN_HELD_HORIZON",
}

// parseConfig reads the command line. A flag not given takes its
// environment variable (read with getenv) when that is set, else its
// built-in default. Usage and parse errors are written to output.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.addr, "addr", defaultAddr, "HTTP listen `address`; port 0 picks a free one (env CAIRN_ADDR)")
	fs.StringVar(&cfg.databaseURL, "database-url", "", "PostgreSQL `URL` (env DATABASE_URL); none: a private cluster in <data-dir>/pg")
	fs.StringVar(&cfg.readDatabaseURL, "read-database-url", "", "PostgreSQL `URL` of a read replica the site and the JSON API read from (env CAIRN_READ_DATABASE_URL); writes and the engine stay on the database URL; none: read from it too")
	fs.StringVar(&cfg.schema, "schema", migrations.DefaultSchema, "Postgres `schema` Cairn lives in (env CAIRN_SCHEMA)")
	fs.BoolVar(&cfg.noMigrate, "no-migrate", false, "do not apply pending migrations at start")
	fs.BoolVar(&cfg.demo, "demo", false, "run the demo workflows")
	fs.StringVar(&cfg.adminPassword, "admin-password", "", "`password` of the admin login (env CAIRN_ADMIN_PASSWORD)")
	fs.StringVar(&cfg.readonlyPassword, "readonly-password", "", "`password` of the read-only login (env CAIRN_READONLY_PASSWORD)")
	fs.StringVar(&cfg.sessionSecret, "session-secret", "", "`secret` (16+ bytes) signing session cookies; give replicas the same one (env CAIRN_SESSION_SECRET; default: random per process)")
	fs.StringVar(&cfg.dataDir, "data-dir", defaultDataDir, "`directory` for local state; the private PostgreSQL cluster lives in <dir>/pg")
	fs.DurationVar(&cfg.heldHorizon, "held-horizon", web.DefaultHeldHorizon, "how long a transaction or replication slot holds back vacuum before the overview's Needs attention shows it (`duration`; env CAIRN_HELD_HORIZON)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: server [flags]\n\nRuns Cairn's server until SIGINT or SIGTERM.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (the server takes flags only)", fs.Arg(0))
	}
	// Environment values are applied after parsing, not as flag defaults,
	// so that -h never prints a password taken from the environment.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, env := range envFlags {
		if v := getenv(env); v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				return cfg, fmt.Errorf("%s: %w", env, err)
			}
		}
	}
	if err := migrations.ValidateSchema(cfg.schema); err != nil {
		return cfg, fmt.Errorf("schema: %w", err)
	}
	if cfg.addr == "" {
		return cfg, errors.New("--addr must not be empty")
	}
	if cfg.heldHorizon <= 0 {
		return cfg, fmt.Errorf("--held-horizon %s: must be more than 0", cfg.heldHorizon)
	}
	return cfg, nil
}

// run connects to the database (starting a private cluster when
// cfg.databaseURL is empty), migrates it unless cfg.noMigrate, and serves
// HTTP on cfg.addr until ctx is done. ready, when not nil, is called with
// the address actually listened on once requests are accepted. run returns
// nil after a clean shutdown.
func run(ctx context.Context, cfg config, ready func(addr string)) error {
	logger := cfg.logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := migrations.ValidateSchema(cfg.schema); err != nil {
		return err
	}

	dsn := cfg.databaseURL
	var banner []any // more of the "listening" line
	if dsn == "" {
		cluster, err := startCluster(ctx, cmp.Or(cfg.dataDir, defaultDataDir), logger)
		if err != nil {
			return err
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				logger.Error("stop private PostgreSQL", slog.String("error", err.Error()))
			}
		}()
		dsn = cluster.URL("postgres")
		banner = append(banner, slog.String("psql", psqlCommand(dsn)), slog.String("or", "make psql"))
	}
	logger.InfoContext(ctx, "using database", slog.String("pool", "primary"), slog.String("url", store.RedactDSN(dsn)), slog.String("schema", cfg.schema))

	db, err := openDB(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()

	if err := migrate(ctx, db, cfg, logger); err != nil {
		return err
	}
	tp, stopTracing, err := startTracing(ctx, cfg.otelEnv, logger)
	if err != nil {
		return err
	}
	defer stopTracing() // after the engine's shutdown: its last spans are flushed
	cfg.tracer = tp
	var demoDir string
	if cfg.demo {
		if demoDir, err = newDemoDir(); err != nil {
			return err
		}
		defer removeDemoDir(demoDir, logger) // after the engine's shutdown (defers run last first)
	}
	eng, err := newEngine(ctx, db, dsn, cfg, demoDir, logger)
	if err != nil {
		return err
	}
	// The engine's own context is not ctx: a signal must lead to a graceful
	// Shutdown, not a hard stop.
	if err := eng.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	defer func() {
		hard := cfg.hardStop
		if hard == nil {
			hard = context.Background()
		}
		if err := eng.Shutdown(hard); err != nil {
			logger.Error("engine shutdown", slog.String("error", err.Error()))
		}
	}()
	if cfg.demo {
		stopDemo, err := startDemo(ctx, eng, demoDir, logger)
		if err != nil {
			return err
		}
		defer stopDemo()
	}
	reads, err := store.New(db, cfg.schema)
	if err != nil {
		return err
	}
	replicaReads, closeReads, err := openReplicaReads(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeReads()
	site, err := web.New(web.Config{
		Engine:           eng,
		Reads:            reads,
		ReplicaReads:     replicaReads,
		Logger:           logger,
		AdminPassword:    cfg.adminPassword,
		ReadonlyPassword: cfg.readonlyPassword,
		SessionSecret:    []byte(cfg.sessionSecret),
		ListenAddr:       cfg.addr,
		HeldHorizon:      cfg.heldHorizon,
		TracerProvider:   cfg.tracer,
	})
	if err != nil {
		return err
	}
	hubCtx, stopHub := context.WithCancel(ctx)
	hubDone := make(chan struct{})
	go func() {
		defer close(hubDone)
		if err := site.Run(hubCtx); err != nil && hubCtx.Err() == nil {
			logger.Error("live updates stopped", slog.String("error", err.Error()))
		}
	}()
	defer func() { stopHub(); <-hubDone }()
	return serve(ctx, cfg.addr, site.Handler(), logger, ready, banner...)
}

// psqlCommand returns the psql command line that connects to url.
func psqlCommand(url string) string {
	return "psql '" + url + "'"
}

// newEngine builds the engine the server runs: workers on the default
// queue, LISTEN on dsn, and the demo workflows with --demo (their files in
// demoDir).
func newEngine(ctx context.Context, db *sql.DB, dsn string, cfg config, demoDir string, logger *slog.Logger) (*engine.Engine, error) {
	ecfg := engine.Config{
		Schema:         cfg.schema,
		DatabaseURL:    dsn,
		Logger:         logger,
		TracerProvider: cfg.tracer,
	}
	if cfg.demo {
		demoConfig(&ecfg)
	}
	eng, err := engine.New(db, ecfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if cfg.demo {
		if err := registerDemo(eng, demoDir); err != nil {
			return nil, err
		}
	}
	return eng, nil
}

// openReplicaReads opens the pool on cfg.readDatabaseURL that the site
// and the API read from, and returns a store over it in cfg.schema and a
// func that closes the pool. Without a read URL it returns nil: the site
// reads from the primary.
func openReplicaReads(ctx context.Context, cfg config, logger *slog.Logger) (web.Reads, func(), error) {
	if cfg.readDatabaseURL == "" {
		return nil, func() {}, nil
	}
	db, err := store.Open(ctx, cfg.readDatabaseURL, pingTimeout)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to read database %w", err)
	}
	st, err := store.New(db, cfg.schema)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("read database: %w", err)
	}
	attrs := []any{slog.String("pool", "replica"), slog.String("url", store.RedactDSN(cfg.readDatabaseURL)), slog.String("schema", cfg.schema)}
	if rs, err := st.ReplicaStatusGet(ctx); err != nil {
		logger.WarnContext(ctx, "read database: cannot read its replication state", slog.String("error", err.Error()))
	} else {
		attrs = append(attrs, slog.Bool("in_recovery", rs.InRecovery))
	}
	logger.InfoContext(ctx, "the site and the API read from a replica; writes and the engine use the primary", attrs...)
	return st, func() { db.Close() }, nil
}

// startCluster starts (initialising when needed) the private PostgreSQL
// cluster in dataDir/pg.
func startCluster(ctx context.Context, dataDir string, logger *slog.Logger) (*pgcluster.Cluster, error) {
	dir, err := filepath.Abs(filepath.Join(dataDir, "pg"))
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	// Readable by others, so that when we run as root the "postgres" user
	// that owns dir/pg can reach it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	logger.InfoContext(ctx, "no database URL: using a private PostgreSQL cluster", slog.String("dir", dir))
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("start private PostgreSQL in %s: %w", dir, err)
	}
	return cluster, nil
}

// openDB opens a pool on dsn and checks the server answers.
func openDB(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := store.Open(ctx, dsn, pingTimeout)
	if err != nil {
		return nil, fmt.Errorf("connect to database %w", err)
	}
	return db, nil
}

// migrate applies pending migrations, or with cfg.noMigrate only warns
// about them.
func migrate(ctx context.Context, db *sql.DB, cfg config, logger *slog.Logger) error {
	r, err := migrations.NewRunner(db, cfg.schema)
	if err != nil {
		return err
	}
	if cfg.noMigrate {
		pending, err := r.Pending(ctx)
		if err != nil {
			return fmt.Errorf("check migrations: %w", err)
		}
		if pending > 0 {
			logger.WarnContext(ctx, "schema has pending migrations and --no-migrate is set; run `migrate up`",
				slog.String("schema", cfg.schema), slog.Int("pending", pending))
		}
		return nil
	}
	r.Progress = func(direction string, m migrations.Migration, took time.Duration) {
		logger.InfoContext(ctx, "migration applied",
			slog.Int("version", m.Version), slog.String("name", m.Name), slog.Duration("took", took))
	}
	done, err := r.Up(ctx, 0)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	logger.InfoContext(ctx, "schema up to date", slog.String("schema", cfg.schema), slog.Int("applied", len(done)))
	return nil
}

// serve listens on addr, logs the "listening" line (the site's URL, then
// the banner attributes), calls ready and serves h until ctx is done, then
// shuts down gracefully.
func serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger, ready func(string), banner ...any) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	actual := ln.Addr().String()
	logger.InfoContext(ctx, "listening", append([]any{slog.String("addr", actual), slog.String("url", "http://"+actual+"/")}, banner...)...)
	if ready != nil {
		ready(actual)
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down http server", slog.Duration("timeout", shutdownTimeout))
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}
