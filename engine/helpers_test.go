package engine_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testLogger logs warnings and errors of the engine to the test output.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("CAIRN_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// onLog returns a logger that passes records on to next and closes the
// returned channel the first time a record with message msg is logged, at
// any level: a test waits on a point in the engine's life that only its
// log shows.
func onLog(next *slog.Logger, msg string) (*slog.Logger, <-chan struct{}) {
	h := &signalHandler{next: next.Handler(), msg: msg, seen: make(chan struct{}), once: new(sync.Once)}
	return slog.New(h), h.seen
}

type signalHandler struct {
	next slog.Handler
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *signalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

type env struct {
	db  *pgtest.DB
	eng *engine.Engine
	st  *store.Store
}

// fastConfig returns a config with short intervals for tests.
func fastConfig(db *pgtest.DB, t testing.TB) engine.Config {
	return engine.Config{
		DatabaseURL:       db.URL,
		Logger:            testLogger(t),
		PollInterval:      200 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond,
		LeaseDuration:     2 * time.Second,
		RescueInterval:    200 * time.Millisecond,
		ShutdownGrace:     2 * time.Second,
	}
}

// newEngine builds an engine on db; register workflows, then start(t).
func newEngine(t testing.TB, db *pgtest.DB, cfg engine.Config) *engine.Engine {
	t.Helper()
	eng, err := engine.New(db.SQL, cfg)
	require.NoError(t, err)
	return eng
}

func start(t testing.TB, eng *engine.Engine) {
	t.Helper()
	require.NoError(t, eng.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(ctx)
	})
}

func setup(t testing.TB, mutate func(*engine.Config)) env {
	t.Helper()
	db := pgtest.New(t)
	cfg := fastConfig(db, t)
	if mutate != nil {
		mutate(&cfg)
	}
	eng := newEngine(t, db, cfg)
	return env{db: db, eng: eng, st: newStore(t, db, cfg.Schema)}
}

// newStore returns a store over db in schema (the default one when
// empty), for the reads and set-ups a test does beside the engine.
func newStore(t testing.TB, db *pgtest.DB, schema string) *store.Store {
	t.Helper()
	st, err := store.New(db.SQL, cmp.Or(schema, engine.DefaultSchema))
	require.NoError(t, err)
	return st
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

// waitCompleted waits until n tasks of db are completed.
func waitCompleted(t testing.TB, db *pgtest.DB, n int, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("%d tasks completed", n), func() bool {
		var got int
		require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE status = 'completed'`).Scan(&got))
		return got == n
	})
}

// waitRun waits until the run reaches one of the final statuses and
// returns it.
func waitRun(t testing.TB, st *store.Store, runID int64, within time.Duration) *store.Run {
	t.Helper()
	var run *store.Run
	eventually(t, within, "run to finish", func() bool {
		r, err := st.RunGet(context.Background(), runID)
		require.NoError(t, err)
		run = r
		switch r.Status {
		case store.RunCompleted, store.RunFailed, store.RunCancelled, store.RunInterrupted:
			return true
		}
		return false
	})
	return run
}

func taskByName(t testing.TB, st *store.Store, runID int64, name string) store.Task {
	t.Helper()
	tasks, err := st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	for _, tk := range tasks {
		if tk.Name == name {
			return tk
		}
	}
	t.Fatalf("no task %q in run %d", name, runID)
	return store.Task{}
}
