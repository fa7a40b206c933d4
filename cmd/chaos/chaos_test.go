package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cairnhq/cairn/store/pgcluster"
)

// TestMain lets the test binary serve as the worker processes the
// scenarios start (they re-execute the running program).
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestChaosShort runs the short version of every scenario on a private
// cluster of its own (it crashes the server and exhausts its connection
// slots, so it never uses DATABASE_URL's) and fails on a lost task, an
// unexplained repeated execution or a scenario that could not run.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL clusters and worker processes")
	}
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := options{scenario: "all", short: true, runs: 1, workers: 3, slots: 4, rate: 100, work: 50 * time.Millisecond, private: true}
	results, err := run(context.Background(), o, logger, &out)
	t.Logf("\n%s", out.String())
	if errors.Is(err, pgcluster.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(scenarios) {
		t.Fatalf("%d results for %d scenarios", len(results), len(scenarios))
	}
	for _, r := range results {
		if !r.ok() {
			t.Errorf("%s: %s", r.scenario, r)
		}
		if r.completed == 0 {
			t.Errorf("%s: nothing completed", r.scenario)
		}
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
