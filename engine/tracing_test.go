package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// tracedSetup is setup with an SDK tracer provider that exports every
// span, as it ends, to the returned in-memory exporter.
func tracedSetup(t *testing.T) (env, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return setup(t, func(c *engine.Config) { c.TracerProvider = tp }), exp
}

// attrs maps a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// spansNamed returns the exported spans called name.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// hasLinkTo reports whether s links to a span of trace id.
func hasLinkTo(s tracetest.SpanStub, id trace.TraceID) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == id {
			return true
		}
	}
	return false
}

func TestTraceFollowsARunFromEnqueueThroughItsDAG(t *testing.T) {
	t.Parallel()
	e, exp := tracedSetup(t)
	ok := func(ctx context.Context, h *engine.TaskHandle) error { return nil }
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "chain", Tasks: []engine.Task{
		{Name: "a", Run: ok},
		{Name: "b", Deps: []string{"a"}, Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Millisecond, NoJitter: true},
			Run: func(ctx context.Context, h *engine.TaskHandle) error {
				if h.Attempt() == 1 {
					return errors.New("first try fails")
				}
				return nil
			}},
		{Name: "c", Deps: []string{"b"}, Run: ok},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "chain", map[string]any{"n": 1})
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)

	enq := spansNamed(exp, "enqueue chain")
	require.Len(t, enq, 1)
	root := enq[0]
	require.Equal(t, trace.SpanKindProducer, root.SpanKind)
	require.False(t, root.Parent.IsValid(), "an enqueue outside any span starts a trace")
	traceID := root.SpanContext.TraceID()
	ra := attrs(root)
	require.Equal(t, "cairn", ra["messaging.system"].AsString())
	require.Equal(t, "send", ra["messaging.operation.type"].AsString())
	require.Equal(t, "enqueue", ra["messaging.operation.name"].AsString())
	require.Equal(t, "default", ra["messaging.destination.name"].AsString())
	require.Equal(t, "chain", ra["cairn.workflow"].AsString())
	require.Equal(t, run.ID, ra["cairn.run_id"].AsInt64())

	// The run stores the enqueue span's context.
	stored, err := e.st.RunGet(context.Background(), run.ID)
	require.NoError(t, err)
	require.NotNil(t, stored.TraceContext)
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", traceID, root.SpanContext.SpanID()), *stored.TraceContext)

	// One attempt span per attempt (b has two), each a consumer child of
	// the enqueue span in its trace.
	var attempts []tracetest.SpanStub
	for _, name := range []string{"a", "b", "c"} {
		got := spansNamed(exp, "process chain."+name)
		attempts = append(attempts, got...)
		want := 1
		if name == "b" {
			want = 2
		}
		require.Len(t, got, want, "attempt spans of %s", name)
		for _, s := range got {
			require.Equal(t, traceID, s.SpanContext.TraceID(), "task %s in the run's trace", name)
			require.Equal(t, root.SpanContext.SpanID(), s.Parent.SpanID(), "task %s a child of the enqueue", name)
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
			a := attrs(s)
			require.Equal(t, "cairn", a["messaging.system"].AsString())
			require.Equal(t, "process", a["messaging.operation.type"].AsString())
			require.Equal(t, "default", a["messaging.destination.name"].AsString())
			require.Equal(t, name, a["cairn.task"].AsString())
			require.Equal(t, run.ID, a["cairn.run_id"].AsInt64())
			require.Equal(t, taskByName(t, e.st, run.ID, name).ID, a["cairn.task_id"].AsInt64())
			attempt := a["cairn.attempt"].AsInt64()
			if name == "b" && attempt == 1 {
				require.Equal(t, "retried", a["cairn.outcome"].AsString())
				require.Equal(t, codes.Error, s.Status.Code)
				require.Equal(t, "first try fails", s.Status.Description)
				require.NotEmpty(t, s.Events, "the error is recorded as an event")
				continue
			}
			require.Equal(t, "completed", a["cairn.outcome"].AsString())
			require.NotEqual(t, codes.Error, s.Status.Code)
		}
	}
	require.Len(t, attempts, 4)

	// The claim and completion writes are spans of their own, linked to
	// the run's trace. The last write's span ends after the run is seen
	// completed.
	eventually(t, 10*time.Second, "claim and completion spans", func() bool {
		var claim, complete bool
		for _, s := range exp.GetSpans() {
			a := attrs(s)
			switch a["messaging.operation.name"].AsString() {
			case "claim":
				claim = claim || (hasLinkTo(s, traceID) && a["messaging.batch.message_count"].AsInt64() >= 1)
			case "complete":
				complete = complete || (hasLinkTo(s, traceID) && a["messaging.batch.message_count"].AsInt64() >= 1)
			}
		}
		return claim && complete
	})
}

func TestTraceContinuesIntoChildRuns(t *testing.T) {
	t.Parallel()
	e, exp := tracedSetup(t)
	registerChild(t, e)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parent", Tasks: []engine.Task{{Name: "spawn",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			_, err := h.SpawnRun(ctx, "kid", "child", childInput{N: 2})
			return err
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "parent", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	kids := childrenOf(t, e, taskByName(t, e.st, run.ID, "spawn").ID)
	require.Len(t, kids, 1)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, kids[0], 20*time.Second).Status)

	enq := spansNamed(exp, "enqueue parent")
	require.Len(t, enq, 1)
	traceID := enq[0].SpanContext.TraceID()
	spawner := spansNamed(exp, "process parent.spawn")
	require.Len(t, spawner, 1)
	childEnq := spansNamed(exp, "enqueue child")
	require.Len(t, childEnq, 1)
	childTask := spansNamed(exp, "process child.double")
	require.Len(t, childTask, 1)

	require.Equal(t, traceID, childEnq[0].SpanContext.TraceID(), "the child's enqueue is in the parent's trace")
	require.Equal(t, spawner[0].SpanContext.SpanID(), childEnq[0].Parent.SpanID(), "spawned under the spawning attempt")
	require.Equal(t, traceID, childTask[0].SpanContext.TraceID(), "the child's tasks are in the parent's trace")
	require.Equal(t, childEnq[0].SpanContext.SpanID(), childTask[0].Parent.SpanID())
	require.Equal(t, kids[0], attrs(childEnq[0])["cairn.run_id"].AsInt64())
}

func TestNoTracerProviderStoresNoTraceContext(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "plain", Tasks: []engine.Task{
		{Name: "a", Run: func(ctx context.Context, h *engine.TaskHandle) error { return nil }},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "plain", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	var stored *string
	require.NoError(t, e.db.SQL.QueryRow(`SELECT trace_context FROM cairn.runs WHERE id = $1`, run.ID).Scan(&stored))
	require.Nil(t, stored, "tracing off: nothing stored with the run")
}
