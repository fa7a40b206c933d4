package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file holds the read queries of the admin site and its JSON API.

// RunCursor is a position in the runs list, which is ordered by
// (created_at desc, id desc).
type RunCursor struct {
	CreatedAt time.Time
	ID        int64
}

// RunListParams filters and pages the runs list. Zero fields do not filter.
type RunListParams struct {
	// Workflow keeps runs of this workflow.
	Workflow string
	// Statuses keeps runs in one of these statuses.
	Statuses []string
	// CreatedFrom keeps runs created at or after it.
	CreatedFrom *time.Time
	// CreatedTo keeps runs created before it.
	CreatedTo *time.Time
	// InputMatch keeps runs whose input contains, for every term, at least
	// one of the term's JSON documents (jsonb containment, @>).
	InputMatch [][]json.RawMessage
	// ID keeps the run of this id (0: any).
	ID int64
	// Key keeps runs with this idempotency key.
	Key *string
	// OutputMatch keeps runs one of whose tasks' output contains, for
	// every term, one of the term's documents (jsonb containment).
	OutputMatch [][]json.RawMessage
	// InputPaths and OutputPaths are SQL/JSON paths that must exist in
	// the run's input, and in the output of one of its tasks.
	InputPaths, OutputPaths []string
	// After keeps runs older than the cursor (the next page).
	After *RunCursor
	// Before keeps runs newer than the cursor (the previous page).
	Before *RunCursor
	// Limit caps the rows returned. Defaults to 50.
	Limit int
}

// RunListItem is a run of the runs list with a summary of its tasks.
type RunListItem struct {
	Run
	TasksDone    int `bun:"tasks_done" json:"tasks_done"`       // completed or skipped
	TasksFailed  int `bun:"tasks_failed" json:"tasks_failed"`   // failed
	TasksActive  int `bun:"tasks_active" json:"tasks_active"`   // running or deferred
	TasksParked  int `bun:"tasks_parked" json:"tasks_parked"`   // interrupted
	TasksOngoing int `bun:"tasks_ongoing" json:"tasks_ongoing"` // not finished at all
	// Duration is how long the run has run, by the database clock: from
	// its start to its end, or to now while it runs; nil before it starts.
	Duration *float64 `bun:"duration" json:"duration_seconds,omitempty"`
}

// runWhere builds the WHERE clause of a runs list query (without the
// cursor) and its arguments. It is the one place the store assembles SQL
// at run time: the site's search takes any number of terms, each an OR of
// documents, and every term must stay a plain predicate for its index
// (the GIN index on input is only used by `input @> constant`), which a
// fixed statement with optional parameters cannot keep. River's JobList
// builds its WHERE the same way. The text it adds is a conjunction of the
// predicates below, each with its arguments as parameters. Every filter is a plain column predicate, so
// the planner can use runs_created, runs_workflow_created and the GIN
// index on input. Status is not indexed (see migration 007): a status
// filter walks runs_created newest first.
func runWhere(p *RunListParams) (string, []any) {
	var conds []string
	var args []any
	if p.Workflow != "" {
		conds = append(conds, "r.workflow = ?")
		args = append(args, p.Workflow)
	}
	switch len(p.Statuses) {
	case 0:
	case 1:
		conds = append(conds, "r.status = ?")
		args = append(args, p.Statuses[0])
	default:
		conds = append(conds, "r.status = ANY(?::text[])")
		args = append(args, array(p.Statuses))
	}
	if p.CreatedFrom != nil {
		conds = append(conds, "r.created_at >= ?")
		args = append(args, *p.CreatedFrom)
	}
	if p.CreatedTo != nil {
		conds = append(conds, "r.created_at < ?")
		args = append(args, *p.CreatedTo)
	}
	for _, term := range p.InputMatch {
		if len(term) == 0 {
			continue
		}
		alts := make([]string, len(term))
		for i, doc := range term {
			alts[i] = "r.input @> ?::jsonb"
			args = append(args, jsonArg(doc))
		}
		conds = append(conds, "("+strings.Join(alts, " OR ")+")")
	}
	conds, args = searchWhere(p, conds, args)
	if len(conds) == 0 {
		return "true", args
	}
	return strings.Join(conds, " AND "), args
}

// searchWhere adds the search conditions of p (id, key, task output,
// paths) to a runs list query's. A task output term is an EXISTS over the
// run's tasks (by the run's task ids): tasks.output has no index, as one would
// cost every task completion a GIN update; the list's LIMIT bounds the
// scan when matches are common. `\?` is bun's escape of the operator @?.
func searchWhere(p *RunListParams, conds []string, args []any) ([]string, []any) {
	if p.ID != 0 {
		conds = append(conds, "r.id = ?")
		args = append(args, p.ID)
	}
	if p.Key != nil {
		conds = append(conds, "r.idempotency_key = ?")
		args = append(args, *p.Key)
	}
	for _, path := range p.InputPaths {
		conds = append(conds, `r.input @\? ?::jsonpath`)
		args = append(args, path)
	}
	for _, term := range p.OutputMatch {
		if len(term) == 0 {
			continue
		}
		alts := make([]string, len(term))
		for i, doc := range term {
			alts[i] = "t.output @> ?::jsonb"
			args = append(args, jsonArg(doc))
		}
		conds = append(conds, "EXISTS (SELECT 1 FROM ?schema.tasks t WHERE t.id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = r.id)::bigint[]) AND ("+strings.Join(alts, " OR ")+"))")
	}
	for _, path := range p.OutputPaths {
		conds = append(conds, `EXISTS (SELECT 1 FROM ?schema.tasks t WHERE t.id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = r.id)::bigint[]) AND t.output @\? ?::jsonpath)`)
		args = append(args, path)
	}
	return conds, args
}

// RunListFiltered returns one page of runs matching p, newest first, each
// with a summary of its tasks. Paging is by keyset on (created_at, id), so
// a page costs the same however deep it is.
func (s *Store) RunListFiltered(ctx context.Context, p *RunListParams) ([]RunListItem, error) {
	where, args := runWhere(p)
	order := "r.created_at DESC, r.id DESC"
	switch {
	case p.After != nil:
		where += " AND (r.created_at, r.id) < (?, ?)"
		args = append(args, p.After.CreatedAt, p.After.ID)
	case p.Before != nil:
		where += " AND (r.created_at, r.id) > (?, ?)"
		args = append(args, p.Before.CreatedAt, p.Before.ID)
		order = "r.created_at ASC, r.id ASC"
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	var out []RunListItem
	// the view runs prices its per-run lookups of tasks as if every run
	// needed them (only runs stored as pending do): without JIT.
	err := s.scanWithoutJIT(ctx, &out, `
SELECT r.*, c.tasks_done, c.tasks_failed, c.tasks_active, c.tasks_parked, c.tasks_ongoing,
	extract(epoch FROM coalesce(r.finished_at, now()) - r.started_at)::float8 AS duration
FROM (SELECT * FROM ?schema.runs r WHERE `+where+` ORDER BY `+order+` LIMIT ?) r
CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE t.status IN ('completed', 'skipped')) AS tasks_done,
		count(*) FILTER (WHERE t.status = 'failed') AS tasks_failed,
		count(*) FILTER (WHERE t.status IN ('running', 'deferred')) AS tasks_active,
		count(*) FILTER (WHERE t.status = 'interrupted') AS tasks_parked,
		count(*) FILTER (WHERE t.status IN ('not_started', 'ready', 'running', 'deferred')) AS tasks_ongoing
	FROM ?schema.tasks t WHERE t.id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = r.id)::bigint[])
) c
ORDER BY `+order, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	if p.Before != nil {
		slices.Reverse(out)
	}
	return out, nil
}

// RunCountFiltered counts the runs matching p (cursor and limit ignored),
// counting no further than upTo, so that it stays cheap on big tables.
func (s *Store) RunCountFiltered(ctx context.Context, p *RunListParams, upTo int) (int, error) {
	where, args := runWhere(p)
	args = append(args, upTo)
	var n int
	err := s.scanWithoutJIT(ctx, &n, `SELECT count(*) FROM (SELECT 1 FROM ?schema.runs r WHERE `+where+` LIMIT ?) x`, args...)
	if err != nil {
		return 0, fmt.Errorf("count runs: %w", err)
	}
	return n, nil
}

// RunIDListFiltered returns the ids of up to p.Limit runs matching p
// (cursor ignored), newest first.
func (s *Store) RunIDListFiltered(ctx context.Context, p *RunListParams) ([]int64, error) {
	where, args := runWhere(p)
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	args = append(args, limit)
	var ids []int64
	err := s.scanWithoutJIT(ctx, &ids, `SELECT r.id FROM ?schema.runs r WHERE `+where+` ORDER BY r.created_at DESC, r.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list run ids: %w", err)
	}
	return ids, nil
}

// TaskRef names a task and its run.
type TaskRef struct {
	ID    int64 `bun:"id" json:"id"`
	RunID int64 `bun:"run_id" json:"run_id"`
}

// TaskRefListByRunsStatus returns the tasks of the given runs that are in
// status, by run and position.
func (s *Store) TaskRefListByRunsStatus(ctx context.Context, runIDs []int64, status string) ([]TaskRef, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	var out []TaskRef
	err := s.raw(`SELECT id, run_id FROM ?schema.tasks WHERE id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND status = ? ORDER BY run_id, idx`,
		array(runIDs), status).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list %s tasks of runs: %w", status, err)
	}
	return out, nil
}

// TaskCount is a row of cairn_task_counts: how many tasks of a workflow
// and queue are in a state.
type TaskCount struct {
	Workflow string `bun:"workflow" json:"workflow"`
	Queue    string `bun:"queue" json:"queue"`
	Status   string `bun:"status" json:"status"`
	Tasks    int64  `bun:"tasks" json:"tasks"`
}

// TaskCountsFold folds the per-statement deltas that the tasks triggers
// append to task_count_deltas into task_counts (see 005_task_counts), in
// one statement, and returns how many delta rows it folded. Concurrent
// calls are safe: each delta row is deleted, and so added, once.
func (s *Store) TaskCountsFold(ctx context.Context) (int64, error) {
	var n int64
	err := s.raw(`
WITH d AS (
	DELETE FROM ?schema.task_count_deltas RETURNING workflow, queue, status, tasks
), ins AS (
	INSERT INTO ?schema.task_counts AS c (workflow, queue, status, tasks)
	SELECT workflow, queue, status, sum(tasks) FROM d GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
	ON CONFLICT (workflow, queue, status) DO UPDATE SET tasks = c.tasks + excluded.tasks
)
SELECT count(*) FROM d`).Scan(ctx, &n)
	if err != nil {
		return 0, fmt.Errorf("fold task counts: %w", err)
	}
	return n, nil
}

// TaskCountsRecount rebuilds task_counts from a count of the tasks table
// and empties task_count_deltas. The counts are exact without it; it
// repairs them after rows of tasks were written with triggers off
// (session_replication_role = replica, as logical replication does). It
// holds writes to tasks for the length of one count.
func (s *Store) TaskCountsRecount(ctx context.Context) error {
	return s.InTx(ctx, func(tx *Store) error {
		for _, q := range []string{
			`LOCK TABLE ?schema.tasks IN SHARE MODE`,
			`LOCK TABLE ?schema.task_counts, ?schema.task_count_deltas IN EXCLUSIVE MODE`,
			`DELETE FROM ?schema.task_count_deltas`,
			`DELETE FROM ?schema.task_counts`,
			`INSERT INTO ?schema.task_counts (workflow, queue, status, tasks)
			 SELECT workflow, queue, status, count(*) FROM ?schema.tasks GROUP BY 1, 2, 3`,
		} {
			if _, err := tx.exec(ctx, q); err != nil {
				return fmt.Errorf("recount tasks: %w", err)
			}
		}
		return nil
	})
}

// TaskCountsByState returns the task counts per workflow, queue and state.
func (s *Store) TaskCountsByState(ctx context.Context) ([]TaskCount, error) {
	var out []TaskCount
	if err := s.raw(`SELECT workflow, queue, status, tasks FROM ?schema.cairn_task_counts ORDER BY workflow, queue, status`).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	return out, nil
}

// ThroughputBucket is one minute of finished attempts.
type ThroughputBucket struct {
	Minute    time.Time `bun:"minute" json:"minute"`
	Completed int64     `bun:"completed" json:"completed"`
	Failed    int64     `bun:"failed" json:"failed"`
}

// ThroughputPerMinute returns, for every minute from since's minute to
// until's minute (both included, oldest first), how many tasks completed
// and how many failed for good, from task_events.
func (s *Store) ThroughputPerMinute(ctx context.Context, since, until time.Time) ([]ThroughputBucket, error) {
	since = since.UTC().Truncate(time.Minute)
	until = until.UTC().Truncate(time.Minute)
	if until.Before(since) {
		return nil, nil
	}
	var rows []ThroughputBucket
	err := s.raw(`
SELECT date_trunc('minute', at) AS minute,
	count(*) FILTER (WHERE to_status = 'completed') AS completed,
	count(*) FILTER (WHERE to_status = 'failed') AS failed
FROM ?schema.task_events
WHERE at >= ? AND at < ? AND to_status IN ('completed', 'failed')
GROUP BY 1`, since, until.Add(time.Minute)).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	byMinute := make(map[int64]ThroughputBucket, len(rows))
	for _, r := range rows {
		byMinute[r.Minute.Unix()] = r
	}
	out := make([]ThroughputBucket, 0, int(until.Sub(since)/time.Minute)+1)
	for m := since; !m.After(until); m = m.Add(time.Minute) {
		b := byMinute[m.Unix()]
		b.Minute = m
		out = append(out, b)
	}
	return out, nil
}

// WorkerSlots is a worker with its live slot use, from cairn_worker_slots.
type WorkerSlots struct {
	WorkerID     int64          `bun:"worker_id" json:"id"`
	Name         string         `bun:"name" json:"name"`
	Status       string         `bun:"status" json:"status"`
	Slots        int            `bun:"slots" json:"slots"`
	Running      int            `bun:"running" json:"running"`
	Deferred     int            `bun:"deferred" json:"deferred"`
	Queues       map[string]int `bun:"queues,type:jsonb" json:"queues"`
	StartedAt    time.Time      `bun:"started_at" json:"started_at"`
	HeartbeatAt  time.Time      `bun:"heartbeat_at" json:"heartbeat_at"`
	HeartbeatAge float64        `bun:"heartbeat_age" json:"heartbeat_age_seconds"` // by the database clock
	StoppedAt    *time.Time     `bun:"stopped_at" json:"stopped_at,omitempty"`
}

// WorkerSlotList returns up to limit workers, live ones first, each with
// its running and deferred task counts.
func (s *Store) WorkerSlotList(ctx context.Context, limit int) ([]WorkerSlots, error) {
	var out []WorkerSlots
	err := s.raw(`
SELECT ws.worker_id, ws.name, ws.status, ws.slots, ws.running, ws.deferred, w.queues, w.started_at,
	ws.heartbeat_at, extract(epoch FROM ws.heartbeat_age)::float8 AS heartbeat_age, w.stopped_at
FROM ?schema.cairn_worker_slots ws JOIN ?schema.workers w ON w.id = ws.worker_id
ORDER BY ws.status = 'running' DESC, ws.status = 'stopping' DESC, ws.heartbeat_at DESC, ws.worker_id DESC
LIMIT ?`, limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list worker slots: %w", err)
	}
	return out, nil
}

// QueueDepth is a queue with its backlog, from cairn_queue_depth, and the
// slots live workers give it.
type QueueDepth struct {
	Queue         string     `bun:"queue" json:"name"`
	Paused        bool       `bun:"paused" json:"paused"`
	MaxRunning    *int       `bun:"max_running" json:"max_running"`
	Ready         int64      `bun:"ready" json:"ready"`
	Available     int64      `bun:"available" json:"available"`
	Running       int64      `bun:"running" json:"running"`
	Deferred      int64      `bun:"deferred" json:"deferred"`
	OldestReadyAt *time.Time `bun:"oldest_ready_at" json:"oldest_ready_at,omitempty"`
	Slots         int64      `bun:"slots" json:"slots"`
	Workers       int64      `bun:"workers" json:"workers"`
}

// QueueDepthList returns every queue with its depth, by name.
func (s *Store) QueueDepthList(ctx context.Context) ([]QueueDepth, error) {
	var out []QueueDepth
	err := s.raw(`
SELECT d.queue, d.paused, d.max_running, d.ready, d.available, d.running, d.deferred, d.oldest_ready_at,
	coalesce(w.slots, 0) AS slots, coalesce(w.workers, 0) AS workers
FROM ?schema.cairn_queue_depth d
LEFT JOIN (
	SELECT q.key AS queue, sum(q.value::int) AS slots, count(*) AS workers
	FROM ?schema.workers, jsonb_each_text(queues) q
	WHERE status = 'running'
	GROUP BY q.key
) w ON w.queue = d.queue
ORDER BY d.queue`).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list queue depth: %w", err)
	}
	return out, nil
}

// Unroutable is a group of ready tasks that no live worker can run, from
// cairn_unroutable: no running worker serves their queue and registers
// their workflow and task. They wait, with no attempt spent.
type Unroutable struct {
	Queue         string    `bun:"queue" json:"queue"`
	Workflow      string    `bun:"workflow" json:"workflow"`
	Task          string    `bun:"task" json:"task"`
	Ready         int64     `bun:"ready" json:"ready"`
	Available     int64     `bun:"available" json:"available"`
	OldestReadyAt time.Time `bun:"oldest_ready_at" json:"oldest_ready_at"`
	// Version is the version of their runs no live worker serves (nil:
	// runs from before versions).
	Version *string `bun:"version" json:"version,omitempty"`
}

// UnroutableList returns the ready tasks no live worker can run, by
// queue, most ready first. It reads every ready task (their workflow and
// name are not indexed), so it costs a scan of the ready set.
func (s *Store) UnroutableList(ctx context.Context) ([]Unroutable, error) {
	var out []Unroutable
	err := s.raw(`SELECT queue, workflow, task, ready, available, oldest_ready_at, version FROM ?schema.cairn_unroutable
ORDER BY queue, ready DESC, workflow, task, version`).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list unroutable tasks: %w", err)
	}
	return out, nil
}

// TaskAttempt is one finished attempt of a task, from cairn_task_attempts.
type TaskAttempt struct {
	Attempt   int             `bun:"attempt" json:"attempt"`
	WorkerID  *int64          `bun:"worker_id" json:"worker_id,omitempty"`
	Outcome   string          `bun:"outcome" json:"outcome"`
	StartedAt *time.Time      `bun:"started_at" json:"started_at,omitempty"`
	EndedAt   time.Time       `bun:"ended_at" json:"ended_at"`
	Error     *string         `bun:"error" json:"error,omitempty"`
	Detail    json.RawMessage `bun:"detail,type:jsonb" json:"detail,omitempty"`
}

// TaskAttemptList returns the finished attempts of a task, oldest first:
// each ends with a move out of running or deferred (other than a deferral
// or its resumption) and carries the error, log and stack of the attempt.
func (s *Store) TaskAttemptList(ctx context.Context, taskID int64) ([]TaskAttempt, error) {
	var out []TaskAttempt
	// Without JIT: see EventListByTask.
	err := s.scanWithoutJIT(ctx, &out, `
SELECT a.attempt, a.worker_id, a.outcome, a.ended_at, a.error, a.detail,
	(SELECT min(e.at) FROM ?schema.task_events e
	 WHERE e.task_id = a.task_id AND e.attempt = a.attempt AND e.to_status = 'running') AS started_at
FROM ?schema.cairn_task_attempts a
WHERE a.task_id = ? AND a.outcome NOT IN ('running', 'deferred')
ORDER BY a.ended_at, a.attempt`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of task %d: %w", taskID, err)
	}
	return out, nil
}

// TaskDepList returns the dependencies of a task, in the order the task
// declares them (the order its context merges their outputs in); none
// for an unknown task.
func (s *Store) TaskDepList(ctx context.Context, taskID int64) ([]Task, error) {
	var out []Task
	err := s.raw(`
SELECT d.* FROM ?schema.tasks t
JOIN ?schema.tasks d ON d.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(t.deps) AS i WHERE ti.id = t.run_id))
WHERE t.id = ?
ORDER BY array_position(t.deps, d.idx)`, taskID).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list dependencies of task %d: %w", taskID, err)
	}
	return out, nil
}

// EventListByRunRecent returns the latest limit events of a run, oldest
// first.
func (s *Store) EventListByRunRecent(ctx context.Context, runID int64, limit int) ([]Event, error) {
	var out []Event
	// Without JIT: see EventListByTask.
	err := s.scanWithoutJIT(ctx, &out, `WITH re AS MATERIALIZED (SELECT ti.task_ids AS ids, (SELECT min(x) FROM unnest(ti.task_ids) x) AS lo,
	(SELECT max(x) FROM unnest(ti.task_ids) x) AS hi FROM ?schema.run_rows ti WHERE ti.id = ?)
SELECT * FROM (SELECT e.* FROM ?schema.task_events e WHERE e.task_id BETWEEN (SELECT lo FROM re) AND (SELECT hi FROM re)
	AND e.task_id + 0 = ANY((SELECT ids FROM re)::bigint[]) ORDER BY e.id DESC LIMIT ?) e ORDER BY id`,
		runID, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of run %d: %w", runID, err)
	}
	return out, nil
}

// DatabasePing checks that the database answers.
func (s *Store) DatabasePing(ctx context.Context) error {
	var one int
	if err := s.raw(`SELECT 1`).Scan(ctx, &one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// RunCountInterrupted counts the runs parked interrupted (a run is
// interrupted exactly while one of its tasks is), no further than upTo,
// through the partial index tasks_interrupted.
func (s *Store) RunCountInterrupted(ctx context.Context, upTo int) (int, error) {
	var n int
	err := s.raw(`SELECT count(*) FROM (SELECT DISTINCT run_id FROM ?schema.tasks WHERE status = 'interrupted' LIMIT ?) x`, upTo).Scan(ctx, &n)
	if err != nil {
		return 0, fmt.Errorf("count interrupted runs: %w", err)
	}
	return n, nil
}
