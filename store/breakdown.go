package store

import (
	"context"
	"fmt"
	"time"
)

// This file holds the breakdown of the overview and queues pages: per
// workflow and per queue, finished tasks, failures and percentiles of
// queue wait and run time over a recent window, in buckets.

// BreakdownParams is the window of a breakdown.
type BreakdownParams struct {
	// Since and Until bound the window (events at >= Since, < Until).
	Since, Until time.Time
	// Bucket is the width of a bucket; bucket i covers
	// [Since + i*Bucket, Since + (i+1)*Bucket).
	Bucket time.Duration
	// DeferSince starts the span over which moves into and out of
	// deferred are counted (DeferIn, DeferOut); within the window.
	DeferSince time.Time
}

// Breakdown kinds.
const (
	BreakdownWorkflow = "workflow"
	BreakdownQueue    = "queue"
)

// BreakdownRow is one workflow's or queue's figures over one bucket, or
// over the whole window (Bucket -1). Durations are in seconds, nil when
// nothing was measured.
type BreakdownRow struct {
	Kind   string `bun:"kind" json:"kind"` // BreakdownWorkflow or BreakdownQueue
	Name   string `bun:"name" json:"name"`
	Bucket int    `bun:"bucket" json:"bucket"`
	// Completed and Failed count tasks that completed or failed for good.
	Completed int64 `bun:"completed" json:"completed"`
	Failed    int64 `bun:"failed" json:"failed"`
	// Started counts claims (ready -> running).
	Started int64 `bun:"started" json:"started"`
	// WaitP50 and WaitP95 are percentiles of the queue wait of the
	// claims: from available (ready, its backoff over) to running.
	WaitP50 *float64 `bun:"wait_p50" json:"wait_p50_seconds"`
	WaitP95 *float64 `bun:"wait_p95" json:"wait_p95_seconds"`
	// RunP50 and RunP95 are percentiles of the run time of the finished
	// attempts: from the attempt's start to completed or failed.
	RunP50 *float64 `bun:"run_p50" json:"run_p50_seconds"`
	RunP95 *float64 `bun:"run_p95" json:"run_p95_seconds"`
	// DeferIn and DeferOut count moves into and out of deferred since
	// DeferSince (whole-window rows only).
	DeferIn  int64 `bun:"defer_in" json:"defer_in"`
	DeferOut int64 `bun:"defer_out" json:"defer_out"`
}

// TaskBreakdown computes the breakdown of p's window from task_events.
// It reads only the window's events (the BRIN index on task_events.at)
// and, for each, its task row by primary key (workflow, queue and the
// attempt's times); so it costs in proportion to the window's traffic,
// whatever the size of the tables. A queue wait is measured as the
// task's started_at - available_at (available_at is set when the task
// becomes ready, and moved by a backoff or a rate limit) and a run time
// as the event's time - started_at, both for the task's latest attempt
// only (older attempts' start times are not kept on the row). It runs in
// a transaction of its own (the store's, when bound to one) with JIT
// compilation off.
func (s *Store) TaskBreakdown(ctx context.Context, p BreakdownParams) ([]BreakdownRow, error) {
	if p.Bucket <= 0 || !p.Until.After(p.Since) {
		return nil, fmt.Errorf("task breakdown: empty window %s..%s by %s", p.Since, p.Until, p.Bucket)
	}
	deferSince := p.DeferSince
	if deferSince.Before(p.Since) {
		deferSince = p.Since
	}
	var out []BreakdownRow
	// Priced by the row estimate of the BRIN scan, the statement crosses
	// the JIT threshold at about a million tasks, and its compilation
	// (hundreds of ms) would cost more than running it.
	err := s.scanWithoutJIT(ctx, &out, `
WITH ev AS (
	SELECT e.from_status, e.to_status, e.at, t.workflow, t.queue,
		floor(date_part('epoch', e.at - ?::timestamptz) / ?)::int AS bucket,
		CASE WHEN e.from_status = 'ready' AND e.to_status = 'running' AND e.attempt = t.attempt
			THEN greatest(date_part('epoch', t.started_at - t.available_at), 0) END AS wait,
		CASE WHEN e.to_status IN ('completed', 'failed') AND e.attempt = t.attempt AND t.started_at IS NOT NULL
			THEN greatest(date_part('epoch', e.at - t.started_at), 0) END AS run
	FROM ?schema.task_events e
	-- One primary-key lookup per event of the window (OFFSET 0 keeps the
	-- planner from turning it into a hash join over all of tasks).
	CROSS JOIN LATERAL (
		SELECT t.workflow, t.queue, t.attempt, t.started_at, t.available_at
		FROM ?schema.tasks t WHERE t.id = e.task_id OFFSET 0
	) t
	WHERE e.at >= ? AND e.at < ?
		AND (e.to_status IN ('completed', 'failed')
			OR (e.from_status = 'ready' AND e.to_status = 'running')
			OR ((e.to_status = 'deferred' OR e.from_status = 'deferred') AND e.at >= ?))
)
SELECT kind, name, bucket, completed, failed, started,
	wait_p[1] AS wait_p50, wait_p[2] AS wait_p95, run_p[1] AS run_p50, run_p[2] AS run_p95, defer_in, defer_out
FROM (
	SELECT CASE WHEN GROUPING(workflow) = 0 THEN 'workflow' ELSE 'queue' END AS kind,
		coalesce(workflow, queue) AS name,
		CASE WHEN GROUPING(bucket) = 0 THEN bucket ELSE -1 END AS bucket,
		count(*) FILTER (WHERE to_status = 'completed') AS completed,
		count(*) FILTER (WHERE to_status = 'failed') AS failed,
		count(*) FILTER (WHERE from_status = 'ready' AND to_status = 'running') AS started,
		-- One sort per measure for both percentiles.
		percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY wait) AS wait_p,
		percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY run) AS run_p,
		count(*) FILTER (WHERE to_status = 'deferred' AND at >= ?) AS defer_in,
		count(*) FILTER (WHERE from_status = 'deferred' AND at >= ?) AS defer_out
	FROM ev
	GROUP BY GROUPING SETS ((workflow, bucket), (workflow), (queue, bucket), (queue))
) g
ORDER BY 1, 2, 3`,
		p.Since, p.Bucket.Seconds(), p.Since, p.Until, deferSince, deferSince, deferSince)
	if err != nil {
		return nil, fmt.Errorf("task breakdown: %w", err)
	}
	return out, nil
}
