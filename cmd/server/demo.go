package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// The demo: workflows and a schedule that keep the dashboard alive for a
// newcomer (`make run` uses --demo).
//
//   - "etl": extract -> (transform, enrich) -> wait_for_file -> load. The
//     wait_for_file task defers (releasing its slot) until the file
//     <demo dir>/<run id>.ready exists (demo dir: a fresh temp directory
//     per server, logged at start and removed when the server stops); the
//     demo creates it after ~20 s, or you can `touch` it yourself.
//   - "flaky": a task that fails twice, then succeeds on its third attempt.
//   - "unstable": a task that fails for good until an admin retries it.
//   - schedule "etl-every-minute" enqueues an etl run every minute.

func demoConfig(cfg *engine.Config) {
	cfg.Queues = map[string]engine.QueueConfig{"default": {Slots: 4}}
	cfg.Schedules = []engine.Schedule{{
		Name: "etl-every-minute", Expression: "* * * * *", Workflow: "etl",
		Input: map[string]any{"source": "schedule"},
	}}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newDemoDir creates the directory that holds the demo's ready files:
// one per server, so runs of another database never find a stale file.
// The caller removes it (removeDemoDir) when the server stops.
func newDemoDir() (string, error) {
	dir, err := os.MkdirTemp("", "cairn-demo-")
	if err != nil {
		return "", fmt.Errorf("demo dir: %w", err)
	}
	return dir, nil
}

// removeDemoDir removes the demo directory and its ready files.
func removeDemoDir(dir string, logger *slog.Logger) {
	if err := os.RemoveAll(dir); err != nil {
		logger.Warn("remove demo dir", slog.String("dir", dir), slog.String("error", err.Error()))
	}
}

// registerDemo registers the demo workflows; their ready files live in
// demoDir.
func registerDemo(eng *engine.Engine, demoDir string) error {
	step := func(name string, d time.Duration) engine.Handler {
		return func(ctx context.Context, t *engine.TaskHandle) error {
			t.Logger().Info("working", slog.String("step", name), slog.Duration("for", d))
			if err := pause(ctx, d+time.Duration(rand.IntN(1000))*time.Millisecond); err != nil {
				return err
			}
			return t.SetOutput(map[string]any{name + "_rows": rand.IntN(1000)})
		}
	}
	waitForFile := func(ctx context.Context, t *engine.TaskHandle) error {
		path := filepath.Join(demoDir, fmt.Sprintf("%d.ready", t.RunID()))
		t.Logger().Info("deferring until the file exists (touch it to go on)", slog.String("path", path))
		exists := func(context.Context) bool { _, err := os.Stat(path); return err == nil }
		if err := t.DeferUntil(ctx, exists, 2*time.Second); err != nil {
			return err
		}
		return t.SetOutput(map[string]string{"file": path})
	}
	err := eng.Register(engine.Workflow{Name: "etl", Tasks: []engine.Task{
		{Name: "extract", Run: step("extract", 2*time.Second)},
		{Name: "transform", Deps: []string{"extract"}, Run: step("transform", 3*time.Second)},
		{Name: "enrich", Deps: []string{"extract"}, Run: step("enrich", 2*time.Second)},
		{Name: "wait_for_file", Deps: []string{"transform", "enrich"}, Run: waitForFile, RequeueOnInterrupt: true},
		{Name: "load", Deps: []string{"wait_for_file"}, Run: step("load", time.Second)},
	}})
	if err != nil {
		return err
	}
	// "unstable": its check fails for good on the first attempt and passes
	// when an admin retries it (the site's Retry button).
	err = eng.Register(engine.Workflow{Name: "unstable", Tasks: []engine.Task{
		{Name: "check", Run: func(ctx context.Context, t *engine.TaskHandle) error {
			if t.Attempt() == 1 {
				return engine.Permanent(errors.New("checksum mismatch (retry me from the task page)"))
			}
			return t.SetOutput(map[string]bool{"ok": true})
		}},
		{Name: "publish", Deps: []string{"check"}, Run: step("publish", time.Second)},
	}})
	if err != nil {
		return err
	}
	return eng.Register(engine.Workflow{Name: "flaky", Tasks: []engine.Task{
		{Name: "call_api", Retry: engine.RetryPolicy{MaxAttempts: 5, InitialDelay: 2 * time.Second},
			Run: func(ctx context.Context, t *engine.TaskHandle) error {
				if t.Attempt() < 3 {
					return errors.New("upstream answered 503")
				}
				return t.SetOutput(map[string]int{"attempt": t.Attempt()})
			}},
		{Name: "report", Deps: []string{"call_api"}, Run: step("report", time.Second)},
	}})
}

// startDemo enqueues a few runs and creates each waiting etl run's file
// in demoDir some seconds later, so runs finish by themselves. The
// returned stop ends what it started and waits for it.
func startDemo(ctx context.Context, eng *engine.Engine, demoDir string, logger *slog.Logger) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	defer func() {
		if err != nil {
			stop()
		}
	}()
	for i := range 3 {
		if _, err := eng.Enqueue(ctx, "etl", map[string]any{"source": "demo", "batch": i}); err != nil {
			return nil, fmt.Errorf("demo enqueue: %w", err)
		}
	}
	if _, err := eng.Enqueue(ctx, "flaky", map[string]any{"endpoint": "https://api.example.com"}); err != nil {
		return nil, fmt.Errorf("demo enqueue: %w", err)
	}
	if _, err := eng.Enqueue(ctx, "unstable", map[string]any{"file": "export.csv"}); err != nil {
		return nil, fmt.Errorf("demo enqueue: %w", err)
	}
	logger.InfoContext(ctx, "demo running: etl runs wait for a file", slog.String("dir", demoDir))
	events, unsubscribe := eng.Subscribe(256)
	wg.Go(func() {
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.To != "deferred" {
					continue
				}
				wg.Go(func() {
					if pause(ctx, 20*time.Second) == nil {
						path := filepath.Join(demoDir, fmt.Sprintf("%d.ready", ev.RunID))
						_ = os.WriteFile(path, []byte("ready\n"), 0o644)
						_ = eng.Signal(context.WithoutCancel(ctx), ev.TaskID)
					}
				})
			}
		}
	})
	return stop, nil
}
