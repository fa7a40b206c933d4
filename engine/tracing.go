package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/store"
)

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/cairnhq/cairn/engine"

// tracer makes the engine's spans (Config.TracerProvider, internal/telemetry);
// the zero tracer makes none and its hooks allocate nothing.
type tracer struct{ telemetry.Tracer }

func newTracer(tp trace.TracerProvider, clock func() time.Time) tracer {
	return tracer{telemetry.NewTracer(tp, TracerName, clock)}
}

// enqueue starts the span of an enqueue of ps (see telemetry.Enqueue).
func (tr tracer) enqueue(ctx context.Context, ps []store.RunInsertParams) (context.Context, func([]*Run, error)) {
	if !tr.On() { // (a closure made in telemetry's generic code would allocate)
		return ctx, func([]*Run, error) {}
	}
	return telemetry.Enqueue(tr.Tracer, ctx, ps, func(r *Run) (int64, bool) { return r.ID, r.Existing })
}

// attempt starts ex.span, returning the handler's context; attemptDone ends it.
func (tr tracer) attempt(ctx context.Context, ex *execution) context.Context {
	c := &ex.Task
	ctx, ex.span = tr.Attempt(ctx, telemetry.Task{ID: c.ID, RunID: c.RunID, Attempt: c.Attempt,
		Workflow: c.Workflow, Name: c.Name, Queue: c.Queue, TraceContext: c.TraceContext})
	return ctx
}

func (tr tracer) attemptDone(ex *execution, item store.TransitionItem) { tr.AttemptDone(ex.span, item) }

func (tr tracer) completeBatch(start time.Time, batch []completion, written int, claimed []store.Claimed, err error) {
	tr.CompleteBatch(start, collect(tr, batch, func(c completion) trace.Span { return c.Ex.span }), written, claimed, err)
}

// deferBatch records a park or resume write (op) of exs' tasks.
func (tr tracer) deferBatch(start time.Time, op string, exs []*execution, claimed []store.Claimed, err error) {
	tr.DeferBatch(start, op, collect(tr, exs, func(ex *execution) trace.Span { return ex.span }), claimed, err)
}

// collect returns f of each of items; nil when tracing is off.
func collect[T, U any](tr tracer, items []T, f func(T) U) []U {
	if !tr.On() {
		return nil
	}
	out := make([]U, len(items))
	for i, it := range items {
		out[i] = f(it)
	}
	return out
}
