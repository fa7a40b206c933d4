package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/store"
)

// t0 is the fake clock's reading: every span starts (or ends) at it.
var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// recorded is a Tracer on an SDK provider whose ended spans sr holds,
// on a clock that always reads t0.
func recorded(t *testing.T) (Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return NewTracer(tp, "test", func() time.Time { return t0 }), sr
}

// only returns the one span sr recorded.
func only(t *testing.T, sr *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := sr.Ended()
	require.Len(t, ended, 1)
	return ended[0]
}

// attrsOf maps a span's attributes by key.
func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// run is what the tests enqueue: an id and whether it existed.
type run struct {
	id       int64
	existing bool
}

func runOf(r run) (int64, bool) { return r.id, r.existing }

func TestEnqueueSpanStampsItsContextOnTheRuns(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	parentCtx, parent := tr.t.Start(context.Background(), "request")
	ps := []store.RunInsertParams{{Workflow: "w", Queue: "q"}}
	ctx, end := Enqueue(tr, parentCtx, ps, runOf)
	end([]run{{id: 7, existing: true}}, nil)
	parent.End()

	var s sdktrace.ReadOnlySpan
	for _, e := range sr.Ended() {
		if e.Name() == "enqueue w" {
			s = e
		}
	}
	require.NotNil(t, s)
	require.Equal(t, trace.SpanKindProducer, s.SpanKind())
	require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of ctx's span")
	require.Equal(t, trace.SpanContextFromContext(ctx), s.SpanContext(), "the returned context carries the span")
	require.Equal(t, t0, s.StartTime())
	require.Equal(t, t0, s.EndTime())
	a := attrsOf(s)
	require.Equal(t, "cairn", a["messaging.system"].AsString())
	require.Equal(t, "send", a["messaging.operation.type"].AsString())
	require.Equal(t, "enqueue", a["messaging.operation.name"].AsString())
	require.Equal(t, "q", a["messaging.destination.name"].AsString())
	require.Equal(t, "w", a["cairn.workflow"].AsString())
	require.Equal(t, int64(7), a["cairn.run_id"].AsInt64())
	require.True(t, a["cairn.existing"].AsBool())
	_, batched := a["messaging.batch.message_count"]
	require.False(t, batched, "one run is no batch")

	require.NotNil(t, ps[0].TraceContext)
	require.Equal(t, s.SpanContext(), storedSpanContext(ps[0].TraceContext).WithRemote(false), "the run stores the span's context")
}

func TestEnqueueSpanOfABatchOrAFailure(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	ps := []store.RunInsertParams{{Workflow: "a", Queue: "q"}, {Workflow: "b", Queue: "q"}}
	_, end := Enqueue(tr, context.Background(), ps, runOf)
	end([]run{{id: 1}, {id: 2}}, nil)
	s := only(t, sr)
	require.Equal(t, "enqueue", s.Name(), "runs of several workflows")
	a := attrsOf(s)
	require.Equal(t, int64(2), a["messaging.batch.message_count"].AsInt64())
	require.Equal(t, "q", a["messaging.destination.name"].AsString())
	for _, k := range []attribute.Key{attrWorkflow, attrRunID, attrExisting} {
		_, ok := a[k]
		require.False(t, ok, "%s on a batch of workflows", k)
	}
	require.Equal(t, ps[0].TraceContext, ps[1].TraceContext)

	tr, sr = recorded(t)
	_, end = Enqueue(tr, context.Background(), []store.RunInsertParams{{Workflow: "w", Queue: "q"}}, runOf)
	end([]run{{id: 3}}, errors.New("refused"))
	s = only(t, sr)
	require.Equal(t, codes.Error, s.Status().Code)
	require.Equal(t, "refused", s.Status().Description)
	_, ok := attrsOf(s)[attrRunID]
	require.False(t, ok, "a failed enqueue names no run")
}

func TestAttemptSpanIsAChildOfTheStoredContext(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	enqCtx, enq := tr.t.Start(context.Background(), "enqueue")
	stored := traceContext(enqCtx)
	enq.End()

	task := Task{ID: 11, RunID: 5, Attempt: 2, Workflow: "w", Name: "t", Queue: "q", TraceContext: stored}
	ctx, span := tr.Attempt(context.Background(), task)
	require.Equal(t, span.SpanContext(), trace.SpanContextFromContext(ctx))
	tr.AttemptDone(span, store.TransitionItem{TaskID: 11, To: store.StatusCompleted})

	var s sdktrace.ReadOnlySpan
	for _, e := range sr.Ended() {
		if e.Name() == "process w.t" {
			s = e
		}
	}
	require.NotNil(t, s)
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	require.Equal(t, enq.SpanContext().TraceID(), s.SpanContext().TraceID())
	require.Equal(t, enq.SpanContext().SpanID(), s.Parent().SpanID())
	a := attrsOf(s)
	require.Equal(t, "cairn", a["messaging.system"].AsString())
	require.Equal(t, "process", a["messaging.operation.type"].AsString())
	require.Equal(t, "process", a["messaging.operation.name"].AsString())
	require.Equal(t, "q", a["messaging.destination.name"].AsString())
	require.Equal(t, "w", a["cairn.workflow"].AsString())
	require.Equal(t, "t", a["cairn.task"].AsString())
	require.Equal(t, int64(5), a["cairn.run_id"].AsInt64())
	require.Equal(t, int64(11), a["cairn.task_id"].AsInt64())
	require.Equal(t, int64(2), a["cairn.attempt"].AsInt64())
	require.Equal(t, "completed", a["cairn.outcome"].AsString())
	require.NotEqual(t, codes.Error, s.Status().Code)
	require.Empty(t, s.Events())

	// Without a stored context the attempt is a root span.
	tr, sr = recorded(t)
	_, span = tr.Attempt(context.Background(), Task{ID: 1, Workflow: "w", Name: "t"})
	tr.AttemptDone(span, store.TransitionItem{TaskID: 1, To: store.StatusCompleted})
	require.False(t, only(t, sr).Parent().IsValid())
}

func TestAttemptDoneRecordsAFailure(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	_, span := tr.Attempt(context.Background(), Task{ID: 1, Workflow: "w", Name: "t"})
	msg := "boom"
	tr.AttemptDone(span, store.TransitionItem{TaskID: 1, To: store.StatusReady, Error: &msg})
	s := only(t, sr)
	require.Equal(t, "retried", attrsOf(s)[attrOutcome].AsString())
	require.Equal(t, codes.Error, s.Status().Code)
	require.Equal(t, "boom", s.Status().Description)
	require.Len(t, s.Events(), 1)
	require.Equal(t, "exception", s.Events()[0].Name)
	require.Equal(t, t0, s.Events()[0].Time)
}

// traced returns a stored trace context of a fresh span of tr's.
func traced(tr Tracer) (*string, trace.SpanContext) {
	ctx, span := tr.t.Start(context.Background(), "origin")
	span.End()
	return traceContext(ctx), span.SpanContext()
}

func TestClaimBatchLinksTheClaimedTasksTraces(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	tr.ClaimBatch(t0, "q", 4, nil, nil)
	require.Empty(t, sr.Ended(), "an empty claim is no span")

	tc, sc := traced(tr)
	bad := "garbage"
	start := t0.Add(-time.Second)
	claimed := []store.Claimed{{TraceContext: tc}, {TraceContext: &bad}, {}}
	tr.ClaimBatch(start, "q", 4, claimed, nil)
	var s sdktrace.ReadOnlySpan
	for _, e := range sr.Ended() {
		if e.Name() == "claim q" {
			s = e
		}
	}
	require.NotNil(t, s)
	require.Equal(t, trace.SpanKindInternal, s.SpanKind())
	require.False(t, s.Parent().IsValid(), "a root span")
	require.Equal(t, start, s.StartTime())
	require.Equal(t, t0, s.EndTime())
	require.Len(t, s.Links(), 1, "only readable contexts are linked")
	require.Equal(t, sc.TraceID(), s.Links()[0].SpanContext.TraceID())
	require.Equal(t, sc.SpanID(), s.Links()[0].SpanContext.SpanID())
	a := attrsOf(s)
	require.Equal(t, "cairn", a["messaging.system"].AsString())
	require.Equal(t, "receive", a["messaging.operation.type"].AsString())
	require.Equal(t, "claim", a["messaging.operation.name"].AsString())
	require.Equal(t, "q", a["messaging.destination.name"].AsString())
	require.Equal(t, int64(4), a["cairn.claim.asked"].AsInt64())
	require.Equal(t, int64(3), a["messaging.batch.message_count"].AsInt64())

	// A claim that failed is recorded, claiming nothing.
	tr, sr = recorded(t)
	tr.ClaimBatch(start, "q", 4, nil, errors.New("down"))
	require.Equal(t, codes.Error, only(t, sr).Status().Code)
}

func TestCompleteAndDeferBatchesLinkTheAttempts(t *testing.T) {
	t.Parallel()
	tr, sr := recorded(t)
	_, a1 := tr.Attempt(context.Background(), Task{ID: 1, Workflow: "w", Name: "t"})
	_, a2 := tr.Attempt(context.Background(), Task{ID: 2, Workflow: "w", Name: "t"})
	spans := []trace.Span{a1, nil, a2} // the second attempt has no span
	claimed := []store.Claimed{{}, {}}
	tr.CompleteBatch(t0, spans, 3, claimed, nil)
	tr.DeferBatch(t0, "park", spans[:2], claimed[:1], errors.New("lost"))

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		byName[s.Name()] = s
	}
	links := func(s sdktrace.ReadOnlySpan) []trace.SpanID {
		var ids []trace.SpanID
		for _, l := range s.Links() {
			ids = append(ids, l.SpanContext.SpanID())
		}
		return ids
	}

	c := byName["complete"]
	require.NotNil(t, c)
	require.Equal(t, trace.SpanKindInternal, c.SpanKind())
	require.Equal(t, []trace.SpanID{a1.SpanContext().SpanID(), a2.SpanContext().SpanID()}, links(c))
	a := attrsOf(c)
	require.Equal(t, "cairn", a["messaging.system"].AsString())
	require.Equal(t, "settle", a["messaging.operation.type"].AsString())
	require.Equal(t, "complete", a["messaging.operation.name"].AsString())
	require.Equal(t, int64(3), a["messaging.batch.message_count"].AsInt64())
	require.Equal(t, int64(3), a["cairn.written"].AsInt64())
	require.Equal(t, int64(2), a["cairn.claimed"].AsInt64())
	require.NotEqual(t, codes.Error, c.Status().Code)

	p := byName["park"]
	require.NotNil(t, p)
	require.Equal(t, trace.SpanKindInternal, p.SpanKind())
	require.Equal(t, []trace.SpanID{a1.SpanContext().SpanID()}, links(p))
	a = attrsOf(p)
	require.Equal(t, "settle", a["messaging.operation.type"].AsString())
	require.Equal(t, "park", a["messaging.operation.name"].AsString())
	require.Equal(t, int64(2), a["messaging.batch.message_count"].AsInt64())
	require.Equal(t, int64(1), a["cairn.claimed"].AsInt64())
	require.Equal(t, codes.Error, p.Status().Code)
}

func TestStoredTraceContextRoundTrips(t *testing.T) {
	t.Parallel()
	require.Nil(t, traceContext(context.Background()), "no span, nothing stored")
	require.False(t, storedSpanContext(nil).IsValid())
	bad := "not a traceparent"
	require.False(t, storedSpanContext(&bad).IsValid())
	ctx := context.Background()
	require.Equal(t, ctx, withStoredContext(ctx, nil))

	ts, err := trace.ParseTraceState("vendor=x")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	tc := traceContext(trace.ContextWithSpanContext(ctx, sc))
	require.NotNil(t, tc)
	require.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01 vendor=x", *tc)
	require.Equal(t, sc.WithRemote(true), storedSpanContext(tc))
}

// Without a provider every hook returns at its first test: no span, no
// stamped context, no allocation.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestOffMakesNothing(t *testing.T) {
	tr := NewTracer(nil, "test", time.Now)
	require.False(t, tr.On())
	ctx := context.Background()
	ps := []store.RunInsertParams{{Workflow: "w", Queue: "q"}}
	claimed := []store.Claimed{{}}
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tr.Attempt(ctx, Task{ID: 1, Workflow: "w", Name: "t"})
		tr.AttemptDone(span, store.TransitionItem{TaskID: 1, To: store.StatusCompleted})
		tr.ClaimBatch(t0, "q", 1, claimed, nil)
		tr.CompleteBatch(t0, nil, 1, claimed, nil)
		tr.DeferBatch(t0, "park", nil, claimed, nil)
		if c != ctx || span != nil {
			t.Fatal("an attempt span while off")
		}
	})
	require.Zero(t, allocs)
	c, end := Enqueue(tr, ctx, ps, runOf)
	end([]run{{id: 1}}, nil)
	require.Equal(t, ctx, c)
	require.Nil(t, ps[0].TraceContext)
}
