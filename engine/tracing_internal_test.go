package engine

import (
	"context"
	"testing"
	"time"

	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/store"
)

// Without a TracerProvider the tracing hooks on the hot path (claim,
// attempt, completion, park) cost a test and a return: no span, no
// attribute slice, no context value.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestTracingOffAllocatesNothing(t *testing.T) {
	var tr tracer // what New makes without a provider
	ctx := context.Background()
	c := store.Claimed{Task: store.Task{ID: 1, RunID: 2, Workflow: "w", Name: "t", Queue: "default"}}
	ex := &execution{}
	ex.Task = executor.NewTask(c)
	ps := []store.RunInsertParams{{Workflow: "w", Queue: "default"}}
	batch := []completion{{Ex: ex}}
	exs := []*execution{ex}
	claimed := []store.Claimed{c}
	now := time.Unix(0, 0)
	allocs := testing.AllocsPerRun(100, func() {
		c, end := tr.enqueue(ctx, ps)
		end(nil, nil)
		c = tr.attempt(c, ex)
		tr.attemptDone(ex, store.TransitionItem{TaskID: 1, To: store.StatusCompleted})
		tr.ClaimBatch(now, "default", 1, claimed, nil)
		tr.completeBatch(now, batch, 1, claimed, nil)
		tr.deferBatch(now, "park", exs, claimed, nil)
		_ = c
	})
	if allocs != 0 {
		t.Fatalf("tracing off: %v allocations per hook round, want 0", allocs)
	}
	if ps[0].TraceContext != nil || ex.span != nil {
		t.Fatal("tracing off: a trace context was stamped or a span started")
	}
}
