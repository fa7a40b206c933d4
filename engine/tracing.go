package engine

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/store"
)

// Tracing (OpenTelemetry, see Config.TracerProvider). An enqueue is a
// producer span; its W3C trace context is stored with the run
// (runs.trace_context), and every attempt of every task of the run is a
// consumer span whose parent is that context, so one trace holds a run
// from its enqueue to its last task. A task that spawns a child run
// enqueues it under its attempt's span: the child run's tasks join the
// same trace. Claim statements and completion, park and resume writes
// are internal spans of their own, linked to the traces of the tasks they
// claim or finish.
//
// Without a provider the tracer is zero and every hook returns at its
// first test: no span, no attributes, no context value, nothing stored
// (TestTracingOffAllocatesNothing checks the hooks allocate nothing).

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/cairnhq/cairn/engine"

// messagingSystem is the messaging.system attribute of Cairn's spans.
const messagingSystem = "cairn"

// Span attributes of Cairn's own, beside the messaging conventions.
const (
	attrWorkflow = attribute.Key("cairn.workflow")
	attrRunID    = attribute.Key("cairn.run_id")
	attrTaskID   = attribute.Key("cairn.task_id")
	attrTask     = attribute.Key("cairn.task")
	attrAttempt  = attribute.Key("cairn.attempt")
	attrOutcome  = attribute.Key("cairn.outcome")
	attrExisting = attribute.Key("cairn.existing")
	attrAsked    = attribute.Key("cairn.claim.asked")
	attrClaimed  = attribute.Key("cairn.claimed")
	attrWritten  = attribute.Key("cairn.written")
)

// tracer makes the engine's spans; the zero tracer (no provider) makes
// none.
type tracer struct {
	t     trace.Tracer // nil: tracing is off
	clock func() time.Time
}

func newTracer(tp trace.TracerProvider, clock func() time.Time) tracer {
	if tp == nil {
		return tracer{}
	}
	return tracer{t: tp.Tracer(TracerName), clock: clock}
}

func (tr tracer) on() bool { return tr.t != nil }

// noEnqueueEnd ends no span (tracing off).
func noEnqueueEnd([]*Run, error) {}

// enqueue starts the producer span of an enqueue (or spawn) of ps and
// stamps each with the span's trace context, to be stored with the run.
// The span is a child of ctx's span (an HTTP request, or the attempt
// that spawns the runs). Call the returned function with the outcome.
func (tr tracer) enqueue(ctx context.Context, ps []store.RunInsertParams) (context.Context, func([]*Run, error)) {
	if !tr.on() || len(ps) == 0 {
		return ctx, noEnqueueEnd
	}
	workflow, queue := ps[0].Workflow, ps[0].Queue
	for _, p := range ps[1:] {
		if p.Workflow != workflow {
			workflow = ""
		}
		if p.Queue != queue {
			queue = ""
		}
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(messagingSystem),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("enqueue"),
	}
	name := "enqueue"
	if workflow != "" {
		name += " " + workflow
		attrs = append(attrs, attrWorkflow.String(workflow))
	}
	if queue != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(queue))
	}
	if len(ps) > 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(ps)))
	}
	ctx, span := tr.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...),
		trace.WithTimestamp(tr.clock()))
	if tc := traceContext(ctx); tc != nil {
		for i := range ps {
			ps[i].TraceContext = tc
		}
	}
	return ctx, func(runs []*Run, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(runs) == 1 {
			span.SetAttributes(attrRunID.Int64(runs[0].ID), attrExisting.Bool(runs[0].Existing))
		}
		span.End(trace.WithTimestamp(tr.clock()))
	}
}

// attempt starts the consumer span of one attempt of ex's task, a child
// of the run's stored trace context (a root span when the run has none),
// and returns the handler's context carrying it. attemptDone ends it.
func (tr tracer) attempt(ctx context.Context, ex *execution) context.Context {
	if !tr.on() {
		return ctx
	}
	c := &ex.Task
	parent := withStoredContext(ctx, c.TraceContext)
	ctx, ex.span = tr.t.Start(parent, "process "+c.Workflow+"."+c.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(tr.clock()),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(messagingSystem),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
			semconv.MessagingDestinationName(c.Queue),
			attrWorkflow.String(c.Workflow),
			attrRunID.Int64(c.RunID),
			attrTaskID.Int64(c.ID),
			attrTask.String(c.Name),
			attrAttempt.Int(c.Attempt),
		))
	return ctx
}

// attemptDone ends ex's attempt span with the outcome item records: the
// error and an Error status for an attempt that failed (retried or not)
// or was interrupted.
func (tr tracer) attemptDone(ex *execution, item store.TransitionItem) {
	if ex.span == nil {
		return
	}
	span := ex.span
	span.SetAttributes(attrOutcome.String(attemptOutcome(item, nil)))
	if item.Error != nil && item.To != store.StatusCompleted {
		span.AddEvent("exception", trace.WithAttributes(semconv.ExceptionMessage(*item.Error)), trace.WithTimestamp(tr.clock()))
		span.SetStatus(codes.Error, *item.Error)
	}
	span.End(trace.WithTimestamp(tr.clock()))
}

// claimBatch records a claim statement that ran from start: an internal
// span linked to the traces of the tasks it claimed. A claim that found
// nothing (and did not fail) is not recorded: idle polls would fill the
// traces with empty spans.
func (tr tracer) claimBatch(start time.Time, queue string, asked int, claimed []store.Claimed, err error) {
	if !tr.on() || (len(claimed) == 0 && err == nil) {
		return
	}
	links := make([]trace.Link, 0, len(claimed))
	for i := range claimed {
		if sc := storedSpanContext(claimed[i].TraceContext); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	tr.batch("claim "+queue, start, err, links,
		semconv.MessagingOperationTypeReceive,
		semconv.MessagingOperationName("claim"),
		semconv.MessagingDestinationName(queue),
		attrAsked.Int(asked),
		semconv.MessagingBatchMessageCount(len(claimed)))
}

// completeBatch records a completion write that ran from start: written
// transitions of finished attempts (and resumed deferred tasks), and
// the tasks it claimed along, linked to the finished attempts' spans.
func (tr tracer) completeBatch(start time.Time, batch []completion, written int, claimed []store.Claimed, err error) {
	if !tr.on() {
		return
	}
	links := make([]trace.Link, 0, len(batch))
	for _, b := range batch {
		if b.Ex.span != nil {
			links = append(links, trace.Link{SpanContext: b.Ex.span.SpanContext()})
		}
	}
	tr.batch("complete", start, err, links,
		semconv.MessagingOperationTypeSettle,
		semconv.MessagingOperationName("complete"),
		semconv.MessagingBatchMessageCount(len(batch)),
		attrWritten.Int(written),
		attrClaimed.Int(len(claimed)))
}

// deferBatch records a park or resume write (op) that ran from start,
// linked to the spans of the attempts it moved.
func (tr tracer) deferBatch(start time.Time, op string, batch []*execution, claimed []store.Claimed, err error) {
	if !tr.on() {
		return
	}
	links := make([]trace.Link, 0, len(batch))
	for _, ex := range batch {
		if ex.span != nil {
			links = append(links, trace.Link{SpanContext: ex.span.SpanContext()})
		}
	}
	tr.batch(op, start, err, links,
		semconv.MessagingOperationTypeSettle,
		semconv.MessagingOperationName(op),
		semconv.MessagingBatchMessageCount(len(batch)),
		attrClaimed.Int(len(claimed)))
}

// batch records one statement of the engine's machinery, from start to
// now, as an internal root span.
func (tr tracer) batch(name string, start time.Time, err error, links []trace.Link, attrs ...attribute.KeyValue) {
	_, span := tr.t.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithNewRoot(),
		trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(append(attrs, semconv.MessagingSystemKey.String(messagingSystem))...))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(tr.clock()))
}

// The stored trace context is the W3C traceparent, followed by a space
// and the tracestate when there is one.
var w3c propagation.TraceContext

// traceContext returns the stored form of ctx's span context, nil when
// it has none.
func traceContext(ctx context.Context) *string {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	if tp == "" {
		return nil
	}
	if ts := carrier.Get("tracestate"); ts != "" {
		tp += " " + ts
	}
	return &tp
}

// withStoredContext returns ctx with the remote span context stored as
// tc (see traceContext); ctx itself when tc is nil or invalid.
func withStoredContext(ctx context.Context, tc *string) context.Context {
	if tc == nil {
		return ctx
	}
	tp, ts, _ := strings.Cut(*tc, " ")
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": ts})
}

// storedSpanContext parses a stored trace context; the zero (invalid)
// span context when tc is nil or unreadable.
func storedSpanContext(tc *string) trace.SpanContext {
	if tc == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(withStoredContext(context.Background(), tc))
}
