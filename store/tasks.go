package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
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
	if err := s.scanPrepared(ctx, &rows, s.query("TaskClaimFloor"), queue, workerID); err != nil {
		return ClaimFloor{}, false, fmt.Errorf("read the claim floor of queue %q: %w", queue, err)
	}
	if len(rows) == 0 {
		return ClaimFloor{}, false, nil
	}
	return ClaimFloor{Priority: rows[0].Priority, At: rows[0].AvailableAt}, true, nil
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
// LIMIT 2). The variants are statements of sql/ up to maxLimitBucket: a
// claim of more tasks (more than a queue's slots at most, see the
// engine's maxSlots) takes at most that many.
func limitBucket(n int) int {
	bucket := minLimitBucket
	for bucket < n && bucket < maxLimitBucket {
		bucket *= 2
	}
	return bucket
}

const (
	minLimitBucket = 32
	maxLimitBucket = 1 << 20
)

// claimQuery is the unkeyed claim statement whose literal LIMIT is limit
// (see limitBucket).
func (s *Store) claimQuery(limit int) string { return s.query(limitName("TaskClaim", limit)) }

// transitionQuery is the transition statement for the conditions of p:
// known is a worker moving tasks whose states it knows (see
// TransitionParams.statesKnown).
func (s *Store) transitionQuery(byWorker, leaseExpired, known bool) string {
	return s.query(transitionName(byWorker, leaseExpired, known))
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
