package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// doneStates are the states that release dependents: a task in one of them
// counts as finished for its dependents' trigger rules. Interrupted is not
// among them: it waits for an admin.
const doneStates = `('completed', 'failed', 'skipped', 'cancelled')`

// IsDone reports whether status releases dependents.
func IsDone(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusSkipped, StatusCancelled:
		return true
	}
	return false
}

// TransitionItem is one task's move in a Transition.
type TransitionItem struct {
	TaskID int64  `json:"id"`
	To     string `json:"to_status"`
	// From, when set, is the state the caller knows the row is in (one of
	// the params' From): a worker's batch whose items all say so is
	// written without reading and locking the rows ahead.
	From string `json:"from_status,omitempty"`
	// Attempt, when non-zero, must equal the row's attempt (CAS).
	Attempt int `json:"attempt,omitempty"`
	// Error is stored as the task's last error and on the event.
	Error *string `json:"error,omitempty"`
	// Detail is stored on the event (stack, log, reason).
	Detail json.RawMessage `json:"detail,omitempty"`
	// Output is stored when To is completed.
	Output json.RawMessage `json:"output,omitempty"`
	// DelayMs is how long after the transaction's time a task moving to
	// ready becomes claimable (database clock, so process clocks never skew it).
	DelayMs int64 `json:"delay_ms,omitempty"`
	// Rescue counts the move as a rescue from a dead worker.
	Rescue bool `json:"rescue,omitempty"`
	// LeaseMs, when non-zero, renews the lease of a task that stays held
	// (to running or deferred) to this long after the transaction's time.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// WaitKind, WaitName, WaitUntil and WaitSince are the durable wait a
	// move to deferred parks the task in (see SetWait); any move clears
	// the row's wait unless it sets one.
	WaitKind  string     `json:"wait_kind,omitempty"`
	WaitName  string     `json:"wait_name,omitempty"`
	WaitUntil *time.Time `json:"wait_until,omitempty"`
	WaitSince *time.Time `json:"wait_since,omitempty"`
	// WaitEveryMs is the check interval of the DeferUntil condition a
	// move to deferred parks the task in (see SetCondition); any other
	// move clears it.
	WaitEveryMs int64 `json:"wait_every_ms,omitempty"`
}

// TransitionParams moves a batch of tasks with compare-and-set: a task
// moves only when its row is still in one of From (and, when WorkerID is
// set, held by that worker; when LeaseExpired is set, its lease expired).
type TransitionParams struct {
	From         []string
	WorkerID     int64
	LeaseExpired bool
	Items        []TransitionItem
}

// statesKnown reports whether p is a worker moving its own tasks and
// every item names its row's state (one of From): the rows need not be
// read and locked ahead (see curKnown).
func (p TransitionParams) statesKnown() bool {
	if p.WorkerID == 0 || p.LeaseExpired {
		return false
	}
	for _, it := range p.Items {
		if it.From == "" || !slices.Contains(p.From, it.From) {
			return false
		}
	}
	return true
}

// Moved is a committed move of one task.
type Moved struct {
	TaskID   int64  `bun:"id"`
	RunID    int64  `bun:"run_id"`
	Queue    string `bun:"queue"`
	From     string `bun:"from_status"`
	To       string `bun:"to_status"`
	Attempt  int    `bun:"attempt"`
	WorkerID *int64 `bun:"held_by"`
}

// Evaluator decides, once every dependency of a task is done, whether it
// runs (true) or is skipped. rule is the task's stored trigger rule (nil:
// all_success); deps are its dependencies in declaration order; input is
// the run input.
//
// The store is given one with WithEvaluator. Whatever it is, the default
// rule is also decided in SQL when every dependency completed (see
// readyInSQL), so for a nil rule it must hold exactly when every
// dependency completed.
type Evaluator func(rule json.RawMessage, deps []DepState, input json.RawMessage) (bool, error)

// ErrNoEvaluator is returned when a task with a trigger rule other than
// the default is released by a store given no Evaluator.
var ErrNoEvaluator = errors.New("no evaluator for trigger rule")

// defaultRule is the Evaluator of a store given none: the default rule,
// all_success, and no other.
func defaultRule(rule json.RawMessage, deps []DepState, _ json.RawMessage) (bool, error) {
	if len(rule) > 0 && string(rule) != "null" {
		return false, fmt.Errorf("%w %s", ErrNoEvaluator, rule)
	}
	for _, d := range deps {
		if d.Status != StatusCompleted {
			return false, nil
		}
	}
	return true, nil
}

// DepState is a finished dependency as a trigger rule sees it: a task of
// the run, or, for a root task of a run enqueued with After, a run it
// waited for (Run set, Status the run's final status, no Output).
type DepState struct {
	Idx    int             `bun:"idx"`
	Name   string          `bun:"name"`
	Status string          `bun:"status"`
	Output json.RawMessage `bun:"output"`
	Run    int64           `bun:"run" json:"run,omitempty"`
}

// Transition applies p in one transaction: the rows move, one event per
// move is appended, dependents whose dependencies are all done become
// ready or skipped (as the store's Evaluator decides, cascading), the runs' statuses are
// refreshed, and everything is announced with NOTIFY at commit. It returns
// the moves of p's items that took place (others found their row elsewhere).
//
// One statement does the common case whole: the moves, their events, the
// dependents' counters, dependents with the default rule whose
// dependencies all completed (made ready in SQL), the run statuses and the
// notifications. Only dependents that need a trigger rule evaluated in Go
// (a custom rule, or a dependency that did not complete) take more
// statements, in the same transaction.
func (s *Store) Transition(ctx context.Context, p TransitionParams) ([]Moved, error) {
	moved, _, err := s.TransitionAll(ctx, p)
	return moved, err
}

// TransitionAll is Transition that also returns the moves of the
// dependents the write released (not_started to ready or skipped,
// cascading), which Transition leaves out. Of those made ready in SQL only
// TaskID, From and To are set.
func (s *Store) TransitionAll(ctx context.Context, p TransitionParams) (moved, released []Moved, err error) {
	if len(p.Items) == 0 {
		return nil, nil, nil
	}
	err = s.InTx(ctx, func(tx *Store) error {
		var unblocked, settle []int64
		var err error
		var rel []Moved
		moved, released, unblocked, settle, err = tx.transition(ctx, p)
		if err != nil {
			return err
		}
		rel, err = tx.releaseAll(ctx, unblocked, settle)
		released = append(released, rel...)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("transition tasks: %w", err)
	}
	return moved, released, nil
}

// readyInSQL is the condition under which the dec CTE of transitionSQL
// makes an unblocked dependent d ready by itself: the default trigger rule
// (all_success), its dependencies moved by this statement all completed
// (u.ok, u.k of them), and the others (if any: the lookup is skipped when
// this statement moved them all) completed before it. A dependency
// committed by another transaction after this statement's snapshot does
// not count as completed here; the dependent then goes to the Go release,
// which reads it afresh.
var readyInSQL = `d.pending_deps - u.n = 0 AND d.trigger_rule IS NULL AND u.ok
	AND (u.k = cardinality(d.deps) OR u.k + (SELECT count(*) FROM ?schema.tasks p
		WHERE p.id = ANY(` + idsAt("ru.task_ids", "d.deps") + `) AND (p.status = 'completed') IS TRUE) = cardinality(d.deps))`

// runTaskIDs is the SQL of the ids of the tasks of the run whose id is
// the expression run: the run row lists them (runs.task_ids, see
// migration 022), so each is a probe of the primary key.
func runTaskIDs(run string) string {
	return `(SELECT ti.task_ids FROM ?schema.runs ti WHERE ti.id = ` + run + `)::bigint[]`
}

// runEventsCTE names re the task ids of the run whose id is the
// expression run, with the lowest and highest, for runEventsWhere.
func runEventsCTE(run string) string {
	return `re AS MATERIALIZED (SELECT ti.task_ids AS ids, (SELECT min(x) FROM unnest(ti.task_ids) x) AS lo,
	(SELECT max(x) FROM unnest(ti.task_ids) x) AS hi FROM ?schema.runs ti WHERE ti.id = ` + run + `)`
}

// runEventsWhere matches the events (alias e) of the tasks of the run of
// runEventsCTE. It reads the range of the run's task ids, drawn together
// at enqueue, in one scan of each partition's index by task: a B-tree's
// range, or the BRIN of a partition still written to, which = ANY would
// scan once per id. The ids themselves are a filter (task_id + 0 keeps
// them out of the index condition).
const runEventsWhere = `e.task_id BETWEEN (SELECT lo FROM re) AND (SELECT hi FROM re)
	AND e.task_id + 0 = ANY((SELECT ids FROM re)::bigint[])`

// runsTaskIDs is runTaskIDs of the runs whose ids are the array runs.
func runsTaskIDs(runs string) string {
	return `ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.runs ti WHERE ti.id = ANY(` + runs + `))`
}

// idsAt is the SQL array of the ids at the positions idxs (an int[]
// expression of task idx) of list, a run's task_ids already at hand.
func idsAt(list, idxs string) string {
	return `ARRAY(SELECT ` + list + `[i + 1] FROM unnest(` + idxs + `) AS i)`
}

// taskIDsAt is the SQL array of the ids of the tasks at the positions
// idxs (an int[] expression) of the run whose id is run.
func taskIDsAt(run, idxs string) string {
	return `ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.runs ti, unnest(` + idxs + `) AS i WHERE ti.id = ` + run + `)`
}

// runCounters derives, per run of the moved rows in src (columns run_id,
// from_status, to_status, attempt, started_at: the task's first start,
// run_fast), the deltas of
// the run's task counters, whether one of its tasks has now started, and
// the earliest start among them. The task of a fast run counts for
// nothing: its run row is not written (see migration 019).
func runCounters(src string) string {
	return `SELECT run_id,
		sum((to_status IN ` + doneStates + `)::int - (from_status IN ` + doneStates + `)::int) AS done,
		sum((to_status = 'failed')::int - (from_status = 'failed')::int) AS failed,
		sum((to_status = 'cancelled')::int - (from_status = 'cancelled')::int) AS cancelled,
		sum((to_status = 'interrupted')::int - (from_status = 'interrupted')::int) AS interrupted,
		bool_or(to_status NOT IN ('not_started', 'ready') OR attempt > 0) AS started,
		min(started_at) AS first_start
	FROM ` + src + ` WHERE NOT run_fast GROUP BY run_id`
}

// runUpdateCTEs are the CTEs delta and rs that fold the moves of src
// (see runCounters) into their runs' counters and status, one update per
// run. rs updates the run row's latest version: a concurrent transition
// of another task of the run, committed meanwhile, is counted (see
// 004_run_counters). A claim does not write the run row, so the first
// write after it stores the run's start: of a one-task run, its task's;
// of a larger run, the earliest of its tasks' (read only then).
func runUpdateCTEs(src string) string {
	return `delta AS (
	` + runCounters(src) + `
), rs AS (
	UPDATE ?schema.runs r SET ` + runSet("r.done_tasks + d.done", "r.failed_tasks + d.failed",
		"r.cancelled_tasks + d.cancelled", "r.interrupted_tasks + d.interrupted", "d.started",
		"CASE WHEN r.task_count = 1 THEN d.first_start ELSE (SELECT min(coalesce(f.first_started_at, f.started_at)) FROM ?schema.tasks f WHERE f.id = ANY(r.task_ids)) END") + `
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
	RETURNING r.id, ` + settleCond + ` AS settle
)`
}

// runSet is the SET list of a runs update (alias r) that stores the task
// counters given as SQL expressions and the status they imply: a run whose
// tasks are all done is completed, failed (one failed) or cancelled (one
// cancelled, none failed); one with an interrupted task is interrupted; a
// paused run is paused; else it is running once a task started, pending
// before. firstStart is the run's start when it has just started (NULL:
// now).
func runSet(done, failed, cancelled, interrupted, started, firstStart string) string {
	return `done_tasks = ` + done + `,
	failed_tasks = ` + failed + `,
	cancelled_tasks = ` + cancelled + `,
	interrupted_tasks = ` + interrupted + `,
	status = CASE
		WHEN ` + done + ` = r.task_count THEN CASE
			WHEN ` + failed + ` > 0 THEN 'failed' WHEN ` + cancelled + ` > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN ` + interrupted + ` > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR ` + started + ` THEN 'running'
		ELSE 'pending' END,
	started_at = coalesce(r.started_at, CASE WHEN ` + started + ` THEN coalesce(` + firstStart + `, now()) END),
	finished_at = CASE WHEN ` + done + ` = r.task_count THEN coalesce(r.finished_at, now()) END,
	updated_at = now()`
}

// transitionSet is the SET list of a task row's move to v.to_status (v:
// an item of TransitionParams); from is the expression of the state it
// moves from.
func transitionSet(from string) string {
	return `
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = coalesce(v.error, t.last_error),
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		max_attempts = CASE WHEN v.to_status = 'ready' AND ` + from + ` IN ('failed', 'interrupted', 'cancelled')
			THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		finished_at = CASE WHEN v.to_status IN ` + doneStates + ` THEN now() END,
		carried_n = CASE WHEN v.to_status IN ` + doneStates + ` THEN NULL ELSE t.carried_n END,
		carried_outputs = CASE WHEN v.to_status IN ` + doneStates + ` THEN NULL ELSE t.carried_outputs END,
		wait_kind = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_kind, '') END,
		wait_name = CASE WHEN v.to_status = 'deferred' THEN nullif(v.wait_name, '') END,
		wait_until = CASE WHEN v.to_status = 'deferred' THEN v.wait_until END,
		wait_since = CASE WHEN v.to_status = 'deferred' THEN v.wait_since END,
		wait_every_ms = CASE WHEN v.to_status = 'deferred' THEN v.wait_every_ms END,
		updated_at = now()`
}

// transitionItems is the record of a TransitionItem in a statement's
// items (jsonb_to_recordset).
const transitionItems = `v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint,
	rescue boolean, lease_ms bigint, wait_kind text, wait_name text, wait_until timestamptz, wait_since timestamptz,
	wait_every_ms bigint)`

// transitionSQL is the CAS statement of transition. Arguments: items
// (jsonb), from states, [worker id], actor, events, ready and control
// channels, whether to announce taken tasks. /*cond*/ stands for the
// extra conditions on the current row (worker, lease).
var transitionSQL = `
WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS ` + transitionItems + `
), cur AS (/*cur*/
), upd AS (
	UPDATE ?schema.tasks t SET` + transitionSet("cur.from_status") + `
	FROM cur JOIN v ON v.id = cur.id
	-- The rows are named twice: by the array of their ids as well as by
	-- the join. The join alone leaves the access path to statistics, and
	-- a generic plan cached while tasks was small (statements are
	-- prepared once) scans the whole table once it is not: measured, a
	-- completion write took 150-250 ms with a few hundred thousand row
	-- versions held by a long snapshot. With the array an index scan of
	-- the primary key is the cheaper path at any size but the smallest.
	-- (Tuple ids would not do: these rows are not locked ahead, and a TID
	-- scan's recheck drops a version updated meanwhile.) A version
	-- updated meanwhile is followed to its latest and rechecked.
	WHERE t.id = ANY(ARRAY(SELECT id FROM cur)) AND t.id = cur.id/*recheck*/
	RETURNING t.id, t.run_id, t.idx, t.queue, t.status AS to_status, cur.from_status, cur.held_by, t.attempt,
		coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, t.dependents, t.output, v.error, v.detail,
		t.conc_key IS NOT NULL AND cur.from_status = 'running' AND t.status <> 'running' AS frees
), x AS (
	-- The dependents to count down, as one row of arrays: unnested below,
	-- the planner expects a few rows and reaches each dependent through
	-- its run's list of task ids and the primary key, however many there
	-- are; (run, position) order is id order (the enqueue draws the ids
	-- in that order), the order row locks are taken in. The aggregates take
	-- their input in the order of the sorted subquery: one sort, where an
	-- ORDER BY in each of the five sorted the dependents five times (a
	-- tenth of a root batch's statement).
	SELECT array_agg(y.run_id) AS runs, array_agg(y.dep) AS idxs, array_agg(y.n) AS ns, array_agg(y.ok) AS oks,
		array_agg(y.k) AS ks, array_agg(y.fwd) AS fwds, array_agg(y.outs) AS outs, array_agg(y.back) AS backs
	FROM (
		SELECT u.run_id, dep, sum(CASE WHEN u.to_status IN ` + doneStates + ` THEN 1 ELSE -1 END)::int AS n,
			bool_and(u.to_status = 'completed') AS ok, count(*)::int AS k,
			-- What the dependent carries of its finished dependencies
			-- (see migration 021): how many, and the outputs that are not
			-- null; a move back out of a finished state clears both.
			count(*) FILTER (WHERE u.to_status IN ` + doneStates + `)::int AS fwd,
			jsonb_agg(jsonb_build_array(u.idx, u.output))
				FILTER (WHERE u.to_status IN ` + doneStates + ` AND u.output IS NOT NULL) AS outs,
			bool_or(u.to_status NOT IN ` + doneStates + `) AS back
		FROM upd u CROSS JOIN LATERAL unnest(u.dependents) AS dep
		WHERE (u.to_status IN ` + doneStates + `) <> (u.from_status IN ` + doneStates + `)
		GROUP BY 1, 2 ORDER BY 1, 2
	) y
), dec AS (
	UPDATE ?schema.tasks d SET
		pending_deps = d.pending_deps - u.n,
		status = CASE WHEN ` + readyInSQL + ` THEN 'ready' ELSE d.status END,
		available_at = CASE WHEN d.pending_deps - u.n = 0 THEN now() ELSE d.available_at END,
		carried_n = CASE WHEN u.back THEN NULL ELSE coalesce(d.carried_n, 0) + u.fwd END,
		carried_outputs = CASE WHEN u.back THEN NULL WHEN u.outs IS NULL THEN d.carried_outputs
			ELSE coalesce(d.carried_outputs, '[]') || u.outs END,
		updated_at = now()
	FROM x CROSS JOIN LATERAL unnest(x.runs, x.idxs, x.ns, x.oks, x.ks, x.fwds, x.outs, x.backs) AS u(run_id, idx, n, ok, k, fwd, outs, back)
	JOIN ?schema.runs ru ON ru.id = u.run_id
	-- Each dependent by id, from its run's list (see migration 022).
	-- "IS TRUE" keeps the status test out of index choice; it is still
	-- rechecked on the latest row version.
	WHERE d.id = ru.task_ids[u.idx + 1] AND (d.status = 'not_started') IS TRUE
	RETURNING d.id, d.run_id, d.queue, d.status, d.attempt, d.pending_deps
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, frees FROM upd
	UNION ALL
	SELECT id, run_id, queue, 'not_started', status, attempt, NULL, false FROM dec WHERE status = 'ready'
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, coalesce(?::bigint, held_by), attempt, error, detail FROM upd
	UNION ALL
	SELECT run_id, id, 'not_started', 'ready', NULL, attempt, NULL, NULL FROM dec WHERE status = 'ready'
), ` + runUpdateCTEs("upd") + notifyCTEsWaking("mv", "frees") + `
SELECT u.id, u.run_id, u.queue, u.from_status, u.to_status, u.attempt, u.held_by,
	-- The released and settled ids come once, on the first row: repeated
	-- on each, a batch of a thousand roots that releases eight thousand
	-- dependents printed (and the engine parsed) eight million ids.
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE pending_deps = 0 AND status = 'not_started') END AS unblocked,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM dec WHERE status = 'ready') END AS promoted,
	CASE WHEN u.first THEN (SELECT array_agg(id) FROM rs WHERE settle) END AS settle,
	u.first, ` + notifyForce + ` AS notified
FROM (SELECT *, row_number() OVER () = 1 AS first FROM upd) u`

// transition runs the CAS statement and returns the moves, the
// dependents it made ready in SQL, the dependents whose last pending
// dependency just finished and whose trigger rule Go must evaluate, and
// the runs it finished that other runs wait for (see runDepsSettle).
func (s *Store) transition(ctx context.Context, p TransitionParams) (moved, promoted []Moved, unblocked, settle []int64, err error) {
	items, err := json.Marshal(p.Items)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	known := p.statesKnown()
	args := []any{jsonArg(items)}
	if !known {
		args = append(args, pgArray(p.From))
	}
	if p.WorkerID != 0 {
		args = append(args, p.WorkerID)
	}
	var actor *int64
	if p.WorkerID != 0 {
		actor = &p.WorkerID
	}
	args = append(args, actor, s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), p.WorkerID == 0)
	// Sized ahead: the scan appends row by row.
	rows := &movedRows{out: make([]Moved, 0, len(p.Items))}
	if err := s.scanPrepared(ctx, rows, s.transitionQuery(p.WorkerID != 0, p.LeaseExpired, known), args...); err != nil {
		return nil, nil, nil, nil, err
	}
	if len(rows.promoted) > 0 {
		promoted = make([]Moved, len(rows.promoted))
		for i, id := range rows.promoted {
			promoted[i] = Moved{TaskID: id, From: StatusNotStarted, To: StatusReady}
		}
	}
	return rows.out, promoted, rows.unblocked, rows.settle, nil
}

type releaseRow struct {
	ID          int64           `bun:"id"`
	RunID       int64           `bun:"run_id"`
	TriggerRule json.RawMessage `bun:"trigger_rule"`
	Input       json.RawMessage `bun:"input"`
	Deps        json.RawMessage `bun:"deps"`
	DelayMs     int64           `bun:"delay_ms"`
}

// releaseAll releases unblocked (see release) and settles the waiters of
// the runs of settle (see runDepsSettle), wave after wave, until nothing
// is left: a run finished by a wave may release the roots of runs that
// wait for it. It returns the moves.
func (s *Store) releaseAll(ctx context.Context, unblocked, settle []int64) (released []Moved, err error) {
	for len(unblocked) > 0 || len(settle) > 0 {
		if len(settle) > 0 {
			more, err := s.runDepsSettle(ctx, settle)
			if err != nil {
				return released, err
			}
			unblocked, settle = append(unblocked, more...), nil
			continue
		}
		var rel []Moved
		rel, unblocked, settle, err = s.release(ctx, unblocked)
		released = append(released, rel...)
		if err != nil {
			return released, err
		}
	}
	return released, nil
}

// release decides ready or skipped for not_started tasks whose
// dependencies are all done, moves them, and returns the moves, the next
// wave and the runs the moves finished that others wait for. A root
// task's dependencies are the runs its run waits for (see WithAfter), as
// DepStates with Run set.
func (s *Store) release(ctx context.Context, ids []int64) (moved []Moved, unblocked, settle []int64, err error) {
	eval := s.eval
	if eval == nil {
		eval = defaultRule
	}
	var rows []releaseRow
	err = s.raw(`
SELECT t.id, t.run_id, t.trigger_rule, r.input,
	CASE WHEN cardinality(t.deps) > 0 THEN
	(SELECT coalesce(jsonb_agg(jsonb_build_object('idx', d.idx, 'name', d.name, 'status', d.status, 'output', d.output) ORDER BY array_position(t.deps, d.idx)), '[]')
	 FROM ?schema.tasks d WHERE d.id = ANY(`+idsAt("r.task_ids", "t.deps")+`))
	ELSE
	(SELECT coalesce(jsonb_agg(jsonb_build_object('run', d.after_run_id, 'status', d.status) ORDER BY d.after_run_id), '[]')
	 FROM ?schema.run_deps d WHERE d.run_id = t.run_id)
	END AS deps,
	-- A root keeps the start time its run was given (WithRunAt).
	CASE WHEN cardinality(t.deps) = 0 THEN greatest(0, ceil(extract(epoch FROM t.available_at - now()) * 1000))::bigint ELSE 0 END AS delay_ms
FROM ?schema.tasks t JOIN ?schema.runs r ON r.id = t.run_id
WHERE t.id = ANY(?) AND t.status = 'not_started' AND t.pending_deps = 0`, array(ids)).Scan(ctx, &rows)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load released tasks: %w", err)
	}
	items := make([]TransitionItem, 0, len(rows))
	for _, r := range rows {
		var deps []DepState
		if err := json.Unmarshal(r.Deps, &deps); err != nil {
			return nil, nil, nil, err
		}
		to := StatusSkipped
		ok, err := eval(r.TriggerRule, deps, r.Input)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("trigger rule of task %d: %w", r.ID, err)
		}
		if ok {
			to = StatusReady
		}
		items = append(items, TransitionItem{TaskID: r.ID, To: to, DelayMs: r.DelayMs})
	}
	if len(items) == 0 {
		return nil, nil, nil, nil
	}
	moved, promoted, unblocked, settle, err := s.transition(ctx, TransitionParams{From: []string{StatusNotStarted}, Items: items})
	return append(moved, promoted...), unblocked, settle, err
}

// Claimed is a task a worker just claimed, with what its handler reads.
// A claim fills the Task fields of claimReturning (status, worker,
// position and shape, checkpoint, keys); the others (lease, timestamps
// but available_at, counters, last error) are left zero.
type Claimed struct {
	Task
	RunInput json.RawMessage `bun:"run_input"`
	// DepOutputs are [[idx, output], ...] of its dependencies; one whose
	// output is null may be left out (see migration 021).
	DepOutputs json.RawMessage `bun:"dep_outputs"`
	// AfterKey, from a keyed claim, is the last key its queue's turn
	// visited: the next claim of the queue starts after it.
	AfterKey *string `bun:"after_key"`
	// TraceContext is the run's trace context (see Run.TraceContext).
	TraceContext *string `bun:"trace_context"`
}

// ClaimParams asks for up to Limits[i] ready tasks of Queues[i].
type ClaimParams struct {
	WorkerID int64
	Queues   []string
	Limits   []int
	Lease    time.Duration
	// Keyed claims keyed tasks (flow control) as well as unkeyed ones,
	// round-robin across keys from After[queue] (see Claimed.AfterKey).
	Keyed bool
	After map[string]string
	// Floors are where each queue's claim scan starts in claim order
	// (priority, available_at), by queue (none: at the start): see
	// ClaimFloor.
	Floors map[string]ClaimFloor
	// KeyedFloors are where each queue's keyed claims start, by queue
	// (none: at the start): they take no keyed task whose available_at
	// is before it. See TaskKeyedFloor.
	KeyedFloors map[string]time.Time
	// Buf, when it has room, is the array the claimed rows are read
	// into: the claim returns Buf[:n] (or a larger array, when n rows do
	// not fit), so a caller that claims over and over reuses one array
	// instead of allocating one per claim. The caller keeps none of the
	// returned structs past its next claim with the same Buf.
	Buf []Claimed
}

// ClaimFloor is a position in a queue's claim order (priority, then
// available_at) below which the claimer knows of no ready task it could
// take. The claim's index scan starts there instead of at the queue's
// first entry, so it does not walk the entries of tasks claimed before:
// while a long transaction holds back the xmin, those entries cannot be
// marked dead or vacuumed, and a scan from the start would visit each
// one's heap tuple (hundreds of thousands after a minute of load).
//
// A floor is a hint the claimer keeps in memory, not a guarantee in the
// data: a transaction that commits a ready task with an older
// available_at than the floor (one that began long before it committed,
// a paused run resumed, a claim rolled back) puts it below. The claimer
// therefore sets its floor somewhat below what it claimed and lowers it
// again from TaskClaimFloor, which reads the lowest ready task without
// one. The zero ClaimFloor is no floor: the scan starts at the start.
type ClaimFloor struct {
	Priority int
	At       time.Time
}

// A floor's time goes to SQL as microseconds since the Unix epoch, 0 for
// none (the zero time.Time): floorMicros writes it, floorTime reads it
// back (an SQL expression) as a timestamptz, -infinity for none.
func floorMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func floorTime(micros string) string {
	return `CASE WHEN ` + micros + ` = 0 THEN '-infinity'::timestamptz ELSE 'epoch'::timestamptz + ` + micros + ` * interval '1 microsecond' END`
}

// floorArgs are the claim statements' floor arguments, parallel to
// p.Queues: priorities and available_at (see floorMicros).
func (p ClaimParams) floorArgs() (any, any) {
	prio := make([]int64, len(p.Queues))
	at := make([]int64, len(p.Queues))
	for i, q := range p.Queues {
		prio[i] = math.MinInt32
		if f := p.Floors[q]; !f.At.IsZero() {
			prio[i], at[i] = int64(f.Priority), floorMicros(f.At)
		}
	}
	return pgArray(prio), pgArray(at)
}

// keyedFloorArgs are the keyed claim statement's floor argument,
// parallel to p.Queues (see floorMicros).
func (p ClaimParams) keyedFloorArgs() any {
	at := make([]int64, len(p.Queues))
	for i, q := range p.Queues {
		at[i] = floorMicros(p.KeyedFloors[q])
	}
	return pgArray(at)
}

// claimCTEs are the claim's CTEs q (queues asked, with the claiming
// worker's handles), cand (ready rows locked with SKIP LOCKED) and upd
// (those rows moved to running), up to upd's RETURNING t.*, which the
// statement using them completes. Arguments: queues, limits, worker id
// (its handles), worker id, lease ms. /*limit*/ is a literal LIMIT (see
// TaskClaim). It takes only unkeyed tasks; keyedClaimCTEs takes keyed
// ones too (see flow.go).
//
// Routing: cand takes only tasks whose "workflow.task" is among the
// worker's handles, read once per queue asked (NULL, or no worker row:
// any task).
var claimCTEs = `
q AS (` + claimQueues + `
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (` + claimScan + `) c
	LIMIT /*limit*/
), ` + claimUpdate

// claimQueues selects the queues asked (name, n, floor) that are not
// paused, with the claiming worker's handles. Arguments: queues, limits,
// floor priorities, floor times (see ClaimParams.floorArgs), worker id.
// The arrays are read through subqueries: of a literal array (a custom
// plan's parameter) the planner counts the elements, of a subquery it
// guesses ten, as of a generic plan's parameter. With both guesses alike,
// the generic plan costs what a custom one does and PostgreSQL settles
// on it instead of planning every execution afresh (see
// TestClaimStatementsCostTheSameWithAndWithoutTheirValues).
var claimQueues = `
	SELECT q.name, q.n, ` + claimFloorColumns + `, w.handles
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)`

// claimFloorColumns turns a queue's floor arguments (q.fp, q.fa) into
// the claim scan's start (fp, fa).
var claimFloorColumns = `q.fp::int AS fp,
		` + floorTime("q.fa") + ` AS fa`

// claimScan locks up to q.n unkeyed ready rows of queue q.name whose
// time has come, of unpaused runs, in claim order, starting at the
// queue's floor (q.fp, q.fa; see ClaimFloor): first the tasks of higher
// priority than the floor's (a lower number; these are never skipped, as
// a new task may have any priority), then, from the floor on, the rest.
// The floor is a row comparison on the claim index's columns after
// queue, so the second index scan starts at it, not at the queue's first
// entry.
const claimScan = `
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE ` + claimable + ` AND t.priority < q.fp
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) above
		UNION ALL
		SELECT * FROM (SELECT t.ctid, t.priority, t.available_at, t.id FROM ?schema.tasks t
			WHERE ` + claimable + ` AND (t.priority, t.available_at) >= (q.fp, q.fa)
			ORDER BY t.priority, t.available_at, t.id LIMIT q.n FOR UPDATE OF t SKIP LOCKED) floored
		LIMIT q.n`

// claimable is what makes a task t of queue q claimable by the worker
// whose handles are q.handles: ready, unkeyed, its time come, its run
// not paused, its handler there.
const claimable = `t.status = 'ready' AND t.fair_key IS NULL AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.runs r WHERE r.id = t.run_id AND r.paused)
			AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))`

// claimFloorSQL reads the lowest claimable task of a queue in claim
// order, without a floor and without locking. Arguments: queue, worker
// id.
const claimFloorSQL = `
SELECT t.priority, t.available_at FROM (SELECT ?::text AS name, (SELECT w.handles FROM ?schema.workers w WHERE w.id = ?) AS handles) q
	CROSS JOIN LATERAL (SELECT t.priority, t.available_at, t.id FROM ?schema.tasks t WHERE ` + claimable + `
		ORDER BY t.priority, t.available_at, t.id LIMIT 1) t`

// TaskClaimFloor reads where a claim of queue by workerID must start to
// see every task it could claim now (ok false: none). A claimer lowers
// its floor to it now and then (see ClaimFloor). It reads every entry
// of the claim index that a floor lets claims skip, so it is as slow as
// a claim without one; it locks nothing.
func (s *Store) TaskClaimFloor(ctx context.Context, queue string, workerID int64) (f ClaimFloor, ok bool, err error) {
	var rows []struct {
		Priority    int       `bun:"priority"`
		AvailableAt time.Time `bun:"available_at"`
	}
	if err := s.scanPrepared(ctx, &rows, s.limitQuery("claimfloor", claimFloorSQL, 0), queue, workerID); err != nil {
		return ClaimFloor{}, false, fmt.Errorf("read the claim floor of queue %q: %w", queue, err)
	}
	if len(rows) == 0 {
		return ClaimFloor{}, false, nil
	}
	return ClaimFloor{Priority: rows[0].Priority, At: rows[0].AvailableAt}, true, nil
}

// claimUpdate moves the rows of cand to running. Arguments: worker id,
// lease ms.
const claimUpdate = `upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(),
		first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
	-- The locked rows are reached by their tuple ids (a TID scan: no
	-- index descent); a version updated meanwhile is followed to its
	-- latest and rechecked. The status test wrapped in "IS TRUE" cannot
	-- pick an index even when statistics (say, gathered while nothing
	-- was ready) make the ready set look tiny.
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING ` + claimReturning

// claimReturning is what a claim's update returns of each claimed row:
// what its statement and the engine read, not the whole row. Every
// column here is decoded for every task claimed (a wide row cost the
// engine a third of its CPU in a burn-down).
const claimReturning = `t.id, t.run_id, t.idx, t.workflow, t.name, t.queue, t.priority, t.status, t.attempt, t.max_attempts,
		t.available_at, t.deps, t.dependents, t.requeue_on_interrupt, t.checkpoint, t.worker_id, t.conc_key, t.rate_key,
		t.carried_n, t.carried_outputs`

// claimedColumns is the select list of a claim's result (Claimed) over upd
// and its run r: the fields of Claimed that a claim fills (see
// claimReturning; the others are left zero).
var claimedColumns = `upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
	upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.requeue_on_interrupt, upd.worker_id, upd.checkpoint,
	upd.conc_key, upd.rate_key, r.input AS run_input, r.trace_context,
	-- The outputs its dependencies' finishes carried into the row (see
	-- migration 021) when each of them carried once, else read from
	-- their rows.
	CASE WHEN cardinality(upd.deps) = 0 THEN NULL
		WHEN upd.carried_n = cardinality(upd.deps) THEN coalesce(upd.carried_outputs, '[]')
		ELSE (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output) ORDER BY d.idx) FROM ?schema.tasks d
	 WHERE d.id = ANY(` + idsAt("r.task_ids", "upd.deps") + `)) END AS dep_outputs`

var claimSQL = claimStatement(claimCTEs+`, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
)`, "")

// claimStatement completes a claim's CTEs (up to a closed upd) into the
// statement: events, NOTIFY, and the claimed rows with extra columns.
// It leaves the run rows alone: a run whose stored status is 'pending'
// and whose task is 'running' is running (see cairn_runs, migration
// 019), and the task's next transition writes the run row.
func claimStatement(ctes, extra string) string {
	return `
WITH` + ctes + `, ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt)
	SELECT run_id, id, 'ready', 'running', worker_id, attempt FROM upd
)` + notifyCTEs("upd") + `
SELECT ` + claimedColumns + extra + `,
	` + notifyForce + ` AS notified
FROM upd JOIN ?schema.runs r ON r.id = upd.run_id
ORDER BY upd.priority, upd.id`
}

// TaskClaim claims ready tasks of uncapped queues in one statement: rows
// whose available_at has come, of unpaused queues and runs, in priority,
// available_at, id order, locked with SKIP LOCKED and moved to running.
func (s *Store) TaskClaim(ctx context.Context, p ClaimParams) ([]Claimed, error) {
	total := claimTotal(p.Limits)
	if total == 0 {
		return nil, nil
	}
	if p.Keyed {
		return s.taskClaimKeyed(ctx, p, total)
	}
	fp, fa := p.floorArgs()
	var notified int
	rows := &claimedRows{out: p.Buf[:0], tail: []string{"notified"}}
	rows.tailDest = []any{column{&notified}}
	err := s.scanPrepared(ctx, rows, s.claimQuery(limitBucket(total)), pgArray(p.Queues), pgArray(p.Limits), fp, fa, p.WorkerID, p.WorkerID, p.Lease.Milliseconds(),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return rows.out, nil
}

// queries caches the rendered text of the prepared statements by schema
// and variant.
var queries sync.Map // string -> string

// claimTotal is how many tasks a claim asks for, over its queues.
func claimTotal(limits []int) int {
	total := 0
	for _, n := range limits {
		total += max(n, 0)
	}
	return total
}

// limitBucket is the next power of two at or above n, and at least
// minLimitBucket: a claim's literal LIMIT. It tells the planner how few
// rows come (with q.n alone it guesses a tenth of the table and picks hash
// joins over whole-table scans, and JIT compilation), and keeps the
// prepared variants few: each is planned on each connection, six times
// (five custom plans before PostgreSQL settles on the generic one) at 2-5
// ms a plan. Small claims share one variant (on the tables of a bloat
// run, the finish-and-claim's generic plan at LIMIT 32 was the one at
// LIMIT 2).
func limitBucket(n int) int {
	bucket := minLimitBucket
	for bucket < n {
		bucket *= 2
	}
	return bucket
}

const minLimitBucket = 32

func (s *Store) claimQuery(limit int) string { return s.limitQuery("claim", claimSQL, limit) }

// limitQuery renders (once per schema, name and limit) a statement whose
// /*limit*/ is a literal LIMIT.
func (s *Store) limitQuery(name, sql string, limit int) string {
	key := s.schema + "/" + name + "/" + strconv.Itoa(limit)
	if q, ok := queries.Load(key); ok {
		return q.(string)
	}
	q := positional(strings.Replace(sql, "/*limit*/", strconv.Itoa(limit), 1), s.schema)
	queries.Store(key, q)
	return q
}

// The current rows of a transition (cur in transitionSQL), in two forms.
const (
	// curLocked reads each row by primary key, locked in id order (so that
	// two batches never wait on each other crosswise), for its state and
	// holder. "IS TRUE" keeps the compare-and-set conditions out of index
	// choice: with stale statistics the planner would otherwise scan all
	// of a worker's tasks per item.
	curLocked = `
	SELECT t.* FROM (SELECT id, attempt FROM v ORDER BY id) w CROSS JOIN LATERAL (
		SELECT t.id, t.status AS from_status, t.worker_id AS held_by
		FROM ?schema.tasks t
		WHERE t.id = w.id
			AND (t.status = ANY(?::text[]) AND (coalesce(w.attempt, 0) = 0 OR t.attempt = w.attempt)/*cond*/) IS TRUE
		FOR UPDATE
	) t`
	// curKnown is for a worker moving its own tasks whose states it knows
	// (a completion batch): the rows are not read and locked ahead; the
	// update itself checks and locks them (recheckKnown), and a row that
	// moved meanwhile is rechecked on its latest version and left out.
	// The from states are checked against the params' From in Go.
	curKnown = `
	SELECT id, from_status, ?::bigint AS held_by FROM v`
	recheckKnown = `
		AND (t.status = cur.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = cur.held_by) IS TRUE`
)

// transitionQuery is the transition statement for the conditions of p:
// known is a worker moving tasks whose states it knows (curKnown).
func (s *Store) transitionQuery(byWorker, leaseExpired, known bool) string {
	key := fmt.Sprintf("%s/transition/%t/%t/%t", s.schema, byWorker, leaseExpired, known)
	if q, ok := queries.Load(key); ok {
		return q.(string)
	}
	q := positional(transitionText(byWorker, leaseExpired, known), s.schema)
	queries.Store(key, q)
	return q
}

// transitionText renders transitionSQL with the conditions of p.
func transitionText(byWorker, leaseExpired, known bool) string {
	if known {
		q := strings.Replace(transitionSQL, "/*cur*/", curKnown, 1)
		return strings.Replace(q, "/*recheck*/", recheckKnown, 1)
	}
	var cond string
	if byWorker {
		cond += " AND t.worker_id = ?"
	}
	if leaseExpired {
		cond += " AND t.lease_expires_at < now()"
	}
	return strings.Replace(transitionSQL, "/*cur*/", strings.Replace(curLocked, "/*cond*/", cond, 1), 1)
}

// TaskClaimCapped claims from p's one queue, which has a cluster-wide
// cap: it locks the queue row, counts running tasks and claims at most
// the room left (and at most p.Limits[0]), in one transaction.
func (s *Store) TaskClaimCapped(ctx context.Context, p ClaimParams) ([]Claimed, error) {
	queue, limit := p.Queues[0], p.Limits[0]
	var out []Claimed
	err := s.InTx(ctx, func(tx *Store) error {
		var q struct {
			Paused     bool `bun:"paused"`
			MaxRunning *int `bun:"max_running"`
		}
		if err := tx.raw(`SELECT paused, max_running FROM ?schema.queues WHERE name = ? FOR UPDATE`, queue).Scan(ctx, &q); err != nil {
			return notFound(err)
		}
		if q.Paused {
			return nil
		}
		if q.MaxRunning != nil {
			var running int
			if err := tx.raw(`SELECT count(*) FROM ?schema.tasks WHERE queue = ? AND status = 'running'`, queue).Scan(ctx, &running); err != nil {
				return err
			}
			limit = min(limit, *q.MaxRunning-running)
		}
		if limit <= 0 {
			return nil
		}
		var err error
		p.Limits = []int{limit}
		out, err = tx.TaskClaim(ctx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim from capped queue %s: %w", queue, err)
	}
	return out, nil
}

// genericPlans makes the rest of the transaction run its prepared
// statements on their generic plans. PostgreSQL plans the keyed claim
// afresh at every run (its generic plan looks dearer than the custom
// ones, which are no better): about 3 ms of planning. The unkeyed claim
// settles on its generic plan by itself (see claimQueues); this saves it
// the five custom plans of each new connection. Only for a transaction
// whose remaining statements are claims.
func (s *Store) genericPlans(ctx context.Context) error {
	_, err := s.exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	return err
}

// TaskResume moves a deferred task held by workerID back to running (its
// slot was re-acquired) and renews its lease.
func (s *Store) TaskResume(ctx context.Context, workerID, taskID int64, lease time.Duration) (bool, error) {
	moved, err := s.TaskResumeBatch(ctx, TaskResumeParams{WorkerID: workerID, Tasks: []ResumeTask{{ID: taskID}}, Lease: lease})
	return len(moved) > 0, err
}

// TaskFinishAndClaim applies p as TransitionAll does and, in the same
// transaction, claims as claim asks (TaskClaim): a worker's finished tasks
// hand their slots to its next ones at one commit. The claim must ask for
// no more tasks than the slots the caller frees, so the worker's running
// rows never exceed its slots.
func (s *Store) TaskFinishAndClaim(ctx context.Context, p TransitionParams, claim ClaimParams) (moved, released []Moved, claimed []Claimed, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var err error
		if moved, released, err = tx.TransitionAll(ctx, p); err != nil {
			return err
		}
		if err := tx.genericPlans(ctx); err != nil {
			return err
		}
		claimed, err = tx.TaskClaim(ctx, claim)
		return err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("finish %d tasks and claim: %w", len(p.Items), err)
	}
	return moved, released, claimed, nil
}

// ResumeTask names one attempt of a deferred task (compare-and-set on both).
type ResumeTask struct {
	ID int64
	// Attempt, when non-zero, must equal the row's attempt.
	Attempt int
}

// TaskResumeParams are the deferred tasks a worker takes back (their
// slots were re-acquired) and the lease they get.
type TaskResumeParams struct {
	WorkerID int64
	Tasks    []ResumeTask
	Lease    time.Duration
}

// TaskResumeBatch moves deferred tasks held by p.WorkerID back to running
// and renews their leases, in one statement and transaction (an event per
// move). It returns the moves that took place: a task missing from them
// is no longer deferred on this worker (cancelled, rescued, or another
// attempt).
func (s *Store) TaskResumeBatch(ctx context.Context, p TaskResumeParams) ([]Moved, error) {
	items := make([]TransitionItem, len(p.Tasks))
	for i, t := range p.Tasks {
		items[i] = TransitionItem{TaskID: t.ID, To: StatusRunning, Attempt: t.Attempt, LeaseMs: p.Lease.Milliseconds()}
	}
	moved, err := s.Transition(ctx, TransitionParams{From: []string{StatusDeferred}, WorkerID: p.WorkerID, Items: items})
	if err != nil {
		return nil, fmt.Errorf("resume %d deferred tasks: %w", len(items), err)
	}
	return moved, nil
}

// TaskDeferClaimParams parks running tasks (Park: items to deferred) and,
// in the same transaction, claims ready tasks for the slots they free.
type TaskDeferClaimParams struct {
	Park TransitionParams
	// Queues whose freed slots are claimed for at once (uncapped queues
	// with nobody waiting for a slot); slots freed in others are left to
	// the caller.
	Queues []string
	Lease  time.Duration
	// Keyed and After are as in ClaimParams.
	Keyed bool
	After map[string]string
	// Floors and KeyedFloors are as in ClaimParams.
	Floors      map[string]ClaimFloor
	KeyedFloors map[string]time.Time
}

// TaskDeferAndClaim moves p.Park's items running -> deferred and claims,
// per queue of p.Queues, as many ready tasks as moved tasks of that queue
// left running: the parked tasks' slots pass to the claimed ones at one
// commit, so the running rows of the worker never exceed its slots.
func (s *Store) TaskDeferAndClaim(ctx context.Context, p TaskDeferClaimParams) (moved []Moved, claimed []Claimed, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var err error
		if moved, err = tx.Transition(ctx, p.Park); err != nil {
			return err
		}
		freed := map[string]int{}
		for _, m := range moved {
			freed[m.Queue]++
		}
		var cp ClaimParams
		for _, q := range p.Queues {
			if n := freed[q]; n > 0 {
				cp.Queues = append(cp.Queues, q)
				cp.Limits = append(cp.Limits, n)
			}
		}
		if len(cp.Queues) == 0 {
			return nil
		}
		cp.WorkerID, cp.Lease, cp.Keyed, cp.After, cp.Floors, cp.KeyedFloors = p.Park.WorkerID, p.Lease, p.Keyed, p.After, p.Floors, p.KeyedFloors
		if err := tx.genericPlans(ctx); err != nil {
			return err
		}
		claimed, err = tx.TaskClaim(ctx, cp)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("defer %d tasks and claim: %w", len(p.Park.Items), err)
	}
	return moved, claimed, nil
}

// TaskCheckpoint stores v as the checkpoint of a task held by workerID.
func (s *Store) TaskCheckpoint(ctx context.Context, workerID, taskID int64, v json.RawMessage) error {
	res, err := s.exec(ctx, `UPDATE ?schema.tasks SET checkpoint = ?::jsonb, updated_at = now()
		WHERE id = ? AND worker_id = ? AND status IN ('running', 'deferred')`, jsonArg(v), taskID, workerID)
	if err != nil {
		return fmt.Errorf("checkpoint task %d: %w", taskID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("checkpoint task %d: %w", taskID, ErrNotFound)
	}
	return nil
}

// TaskGet returns one task.
func (s *Store) TaskGet(ctx context.Context, id int64) (*Task, error) {
	var t Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ?`, id).Scan(ctx, &t); err != nil {
		return nil, notFound(err)
	}
	return &t, nil
}

// TaskListByRun returns a run's tasks in definition order.
func (s *Store) TaskListByRun(ctx context.Context, runID int64) ([]Task, error) {
	var out []Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ANY(`+runTaskIDs("?")+`) ORDER BY idx`, runID).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list tasks of run %d: %w", runID, err)
	}
	return out, nil
}

// TaskListByStatus returns the ids and statuses of a run's tasks that are
// in one of statuses.
func (s *Store) TaskListByStatus(ctx context.Context, runID int64, statuses []string) ([]Task, error) {
	var out []Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ANY(`+runTaskIDs("?")+`) AND status = ANY(?) ORDER BY idx`, runID, array(statuses)).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list tasks of run %d: %w", runID, err)
	}
	return out, nil
}

// TaskExpiredLeases returns up to limit running/deferred tasks whose lease
// expired, oldest first: those whose lease expired at or after since (by
// the database's clock, see Now), or all with the zero time.
func (s *Store) TaskExpiredLeases(ctx context.Context, since time.Time, limit int) ([]Task, error) {
	var out []Task
	var from any // NULL: every expired lease
	if !since.IsZero() {
		from = since
	}
	// The lower bound is where the scan of tasks_lease starts: below it
	// lie, while a long transaction holds back the xmin, the entries of
	// every task run since (see ClaimFloor).
	err := s.raw(`SELECT * FROM ?schema.tasks WHERE status IN ('running', 'deferred') AND lease_expires_at < now()
		AND lease_expires_at >= coalesce(?::timestamptz, '-infinity')
		ORDER BY lease_expires_at LIMIT ?`, from, limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("find expired leases: %w", err)
	}
	return out, nil
}

// Now returns the database's clock: now() of a transaction of its own.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.raw(`SELECT now()`).Scan(ctx, &now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// EventListByTask returns a task's events, oldest first. Without JIT:
// the planner prices a BRIN scan of a large partition still written to
// (see HistoryPartitionIndex) far above what it costs.
func (s *Store) EventListByTask(ctx context.Context, taskID int64) ([]Event, error) {
	var out []Event
	if err := s.scanWithoutJIT(ctx, &out, `SELECT * FROM ?schema.task_events WHERE task_id = ? ORDER BY id`, taskID); err != nil {
		return nil, fmt.Errorf("list events of task %d: %w", taskID, err)
	}
	return out, nil
}

// EventListByRun returns a run's events, oldest first.
func (s *Store) EventListByRun(ctx context.Context, runID int64) ([]Event, error) {
	var out []Event
	// By its tasks: events are indexed by task only (see migration 007).
	// Without JIT: see EventListByTask.
	if err := s.scanWithoutJIT(ctx, &out, `WITH `+runEventsCTE("?")+`
SELECT e.* FROM ?schema.task_events e WHERE `+runEventsWhere+` ORDER BY e.id`, runID); err != nil {
		return nil, fmt.Errorf("list events of run %d: %w", runID, err)
	}
	return out, nil
}

// TaskReopenParams is a task to send back to ready.
type TaskReopenParams struct {
	TaskID int64
	// From are the states it may leave (failed, cancelled, interrupted).
	From []string
	// Detail is stored on the task's event (reason, who asked).
	Detail json.RawMessage
}

// TaskReopen moves a task from one of p.From (failed, cancelled,
// interrupted) back to ready, and sends the dependents that were skipped
// because of it (transitively) back to not_started, so they wait for it
// again. It returns the moves it made, the task's first; none when the
// task was in none of p.From.
func (s *Store) TaskReopen(ctx context.Context, p *TaskReopenParams) ([]Moved, error) {
	var out []Moved
	err := s.InTx(ctx, func(tx *Store) error {
		moved, released, err := tx.TransitionAll(ctx, TransitionParams{From: p.From,
			Items: []TransitionItem{{TaskID: p.TaskID, To: StatusReady, Detail: p.Detail}}})
		if err != nil || len(moved) == 0 {
			return err
		}
		out = append(moved, released...)
		var reset []Moved
		err = tx.raw(`
WITH RECURSIVE d AS (
	SELECT c.id, c.run_id, c.dependents FROM ?schema.tasks t
	JOIN ?schema.tasks c ON c.id = ANY(`+taskIDsAt("t.run_id", "t.dependents")+`)
	WHERE t.id = ? AND c.status = 'skipped'
	UNION
	SELECT c.id, c.run_id, c.dependents FROM d
	JOIN ?schema.tasks c ON c.id = ANY(`+taskIDsAt("d.run_id", "d.dependents")+`)
	WHERE c.status = 'skipped'
), upd AS (
	UPDATE ?schema.tasks t SET status = 'not_started', finished_at = NULL, updated_at = now(), carried_n = NULL, carried_outputs = NULL,
		pending_deps = (SELECT count(*) FROM ?schema.tasks x WHERE x.id = ANY(`+taskIDsAt("t.run_id", "t.deps")+`)
			AND (x.status NOT IN `+doneStates+` OR x.id IN (SELECT id FROM d)))
	FROM d WHERE t.id = d.id
	RETURNING t.id, t.run_id, t.queue, t.attempt
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, attempt, detail)
	SELECT run_id, id, 'skipped', 'not_started', attempt, '{"reason":"dependency retried"}' FROM upd
)
SELECT id, run_id, queue, 'skipped' AS from_status, 'not_started' AS to_status, attempt FROM upd`, p.TaskID).Scan(ctx, &reset)
		if err != nil {
			return fmt.Errorf("reopen dependents of task %d: %w", p.TaskID, err)
		}
		out = append(out, reset...)
		return tx.RunRefresh(ctx, []int64{moved[0].RunID})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
