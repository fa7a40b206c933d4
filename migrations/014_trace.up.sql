-- OpenTelemetry: the W3C trace context (traceparent, then a space and
-- the tracestate when there is one) of the span that enqueued the run.
-- Each task attempt's span is its child, so one trace holds the enqueue,
-- every attempt of every task and the runs the tasks spawn. Written at
-- insert only when the engine traces (Config.TracerProvider); NULL
-- otherwise. It never changes after the insert.
ALTER TABLE runs ADD COLUMN trace_context text;
