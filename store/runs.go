package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// TaskTemplate is one task of a workflow as stored on each new run.
type TaskTemplate struct {
	Idx                int             `json:"idx"`
	Name               string          `json:"name"`
	Queue              string          `json:"queue,omitempty"`    // "" = the run's queue
	Priority           *int            `json:"priority,omitempty"` // nil = the run's priority
	Deps               []int           `json:"deps"`
	Dependents         []int           `json:"dependents"`
	MaxAttempts        int             `json:"max_attempts"`
	TriggerRule        json.RawMessage `json:"trigger_rule,omitempty"`
	RequeueOnInterrupt bool            `json:"requeue_on_interrupt"`
	MaxRescues         int             `json:"max_rescues"`
	// Concurrency and RateLimit, when set, limit the task's starts by a
	// key read from the run input (see FlowKey).
	Concurrency *FlowTemplate `json:"concurrency,omitempty"`
	RateLimit   *FlowTemplate `json:"rate_limit_def,omitempty"`
}

// FlowTemplate is a task's flow-control declaration: its group, the path
// of its key value in the run input (empty: one key for the group), and
// its limit: Max running at once (concurrency), or Limit starts Per
// window (rate).
type FlowTemplate struct {
	Group string
	Path  []string
	Max   int
	Limit int
	Per   time.Duration
}

// taskTemplateRow is a TaskTemplate as runInsertSQL reads it.
type taskTemplateRow struct {
	TaskTemplate
	ConcGroup *string  `json:"conc_group,omitempty"`
	ConcPath  []string `json:"conc_path,omitempty"`
	ConcMax   *int     `json:"conc_max,omitempty"`
	RateGroup *string  `json:"rate_group,omitempty"`
	RatePath  []string `json:"rate_path,omitempty"`
	RateLimit *int     `json:"rate_limit,omitempty"`
	RatePerMs *int64   `json:"rate_per_ms,omitempty"`
}

func templateRow(t TaskTemplate) taskTemplateRow {
	r := taskTemplateRow{TaskTemplate: t}
	if c := t.Concurrency; c != nil {
		r.ConcGroup, r.ConcPath, r.ConcMax = &c.Group, c.Path, &c.Max
	}
	if c := t.RateLimit; c != nil {
		per := c.Per.Milliseconds()
		r.RateGroup, r.RatePath, r.RateLimit, r.RatePerMs = &c.Group, c.Path, &c.Limit, &per
	}
	return r
}

// RunInsertParams is one run to insert with all its tasks.
type RunInsertParams struct {
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input"`
	Key      *string         `json:"key,omitempty"`
	// UniqueFor, when positive, keeps Key held for that long after the
	// run's creation (by the database clock), whatever the run's state:
	// an insert with the key meanwhile returns this run. It needs a Key.
	UniqueFor   time.Duration `json:"-"`
	Queue       string        `json:"queue"`
	Priority    int           `json:"priority"`
	AvailableAt *time.Time    `json:"available_at,omitempty"`
	// Detail, when set, is stored on a creation event of each task (who
	// asked); without it the task row alone records the creation.
	Detail json.RawMessage `json:"detail,omitempty"`
	Tasks  []TaskTemplate  `json:"-"`
	// ParentTaskID, when set, is the task that spawned the run (a child
	// run, see RunSpawn).
	ParentTaskID *int64 `json:"parent_task_id,omitempty"`
	// After are runs the new run's root tasks wait for: they are inserted
	// not_started and released (ready or skipped, by their trigger rule,
	// which sees these runs as DepStates with Run set) once every one of
	// them has finished. Unknown ids fail the insert with ErrUnknownRun.
	After []int64 `json:"-"`
	// AfterRule, when set, replaces the trigger rule of the root tasks of
	// a run with After.
	AfterRule json.RawMessage `json:"after_rule,omitempty"`
	// TraceContext, when set, is the W3C trace context of the span that
	// enqueued the run (see Run.TraceContext).
	TraceContext *string `json:"trace_context,omitempty"`
}

// check returns ErrInvalidValue, naming the field, when PostgreSQL could
// not take p: its values travel inside a jsonb document, where the
// per-argument check sees only the whole.
func (p *RunInsertParams) check() error {
	for _, f := range []struct{ name, v string }{{"workflow", p.Workflow}, {"queue", p.Queue}, {"key", deref(p.Key)}} {
		if err := CheckText(f.v); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidValue, f.name, err)
		}
	}
	if err := CheckJSON(p.Input); err != nil {
		return fmt.Errorf("%w: input: %w", ErrInvalidValue, err)
	}
	if p.UniqueFor < 0 || (p.UniqueFor > 0 && p.Key == nil) {
		return fmt.Errorf("%w: unique_for %s: must be positive and come with a key", ErrInvalidValue, p.UniqueFor)
	}
	if p.Priority < math.MinInt32 || p.Priority > math.MaxInt32 {
		return fmt.Errorf("%w: priority %d: must fit a 32-bit integer", ErrInvalidValue, p.Priority)
	}
	for _, id := range p.After {
		if id <= 0 {
			return fmt.Errorf("%w: after: run id %d must be positive", ErrInvalidValue, id)
		}
	}
	if len(p.AfterRule) > 0 {
		if len(p.After) == 0 {
			return fmt.Errorf("%w: after_rule: needs after (the runs it speaks of)", ErrInvalidValue)
		}
		if err := CheckJSON(p.AfterRule); err != nil {
			return fmt.Errorf("%w: after_rule: %w", ErrInvalidValue, err)
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// RunInserted is the outcome of one RunInsertParams: the new run, or the
// run that already holds its idempotency key (live, or within the window
// of its UniqueFor).
type RunInserted struct {
	Ord      int   `bun:"ord"`
	ID       int64 `bun:"id"`
	Existing bool  `bun:"existing"`
}

type runInsertRow struct {
	RunInsertParams
	Ord         int   `json:"ord"`
	TaskCount   int   `json:"task_count"`
	UniqueForUS int64 `json:"unique_for_us,omitempty"` // UniqueFor in microseconds, rounded up; 0: none
	// AfterDeps are the run_deps rows of After (the status of the runs
	// that had finished), AfterPending how many had not.
	AfterDeps    []runDep `json:"after_deps,omitempty"`
	AfterPending int      `json:"after_pending,omitempty"`
}

type taskInsertRow struct {
	taskTemplateRow
	Workflow string `json:"workflow"`
}

// RunInsertMany inserts runs with all their task rows (roots ready, the
// rest not_started) in one statement; a creation event only for runs
// whose params carry a Detail (who enqueued). A run
// whose idempotency key is held is not inserted; the holder is returned
// with Existing set. A key is held by a live run with that key and, for
// UniqueFor after its creation, by a run inserted with UniqueFor, whatever
// its state. Results are in the order of ps.
func (s *Store) RunInsertMany(ctx context.Context, ps []RunInsertParams) ([]RunInserted, error) {
	after := false
	for i := range ps {
		if err := ps[i].check(); err != nil {
			return nil, fmt.Errorf("insert runs: run %d: %w", i, err)
		}
		after = after || len(ps[i].After) > 0
	}
	if after {
		return s.runInsertAfter(ctx, ps)
	}
	return s.runInsertMany(ctx, ps, nil)
}

// runInsertMany inserts ps (see RunInsertMany); deps, when set, are the
// run dependencies of each (see runInsertAfter).
func (s *Store) runInsertMany(ctx context.Context, ps []RunInsertParams, deps []runDeps) ([]RunInserted, error) {
	out := make([]RunInserted, len(ps))
	pending := make([]int, len(ps)) // indexes of ps still to settle
	for i := range ps {
		pending[i] = i
	}
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 5 {
			return nil, fmt.Errorf("insert runs: idempotency key kept changing hands")
		}
		var err error
		pending, err = s.runInsert(ctx, ps, deps, pending, out)
		if err != nil {
			return nil, fmt.Errorf("insert runs: %w", err)
		}
	}
	return out, nil
}

// runInsert inserts ps[idx...] and fills out; it returns the indexes whose
// key conflicted with a run it could not see (committed meanwhile, or
// finished meanwhile) so the caller tries again.
func (s *Store) runInsert(ctx context.Context, ps []RunInsertParams, deps []runDeps, idx []int, out []RunInserted) ([]int, error) {
	runs := make([]runInsertRow, 0, len(idx))
	templates := map[string][]TaskTemplate{}
	for _, i := range idx {
		p := ps[i]
		us := int64((p.UniqueFor + time.Microsecond - 1) / time.Microsecond)
		row := runInsertRow{RunInsertParams: p, Ord: i, TaskCount: len(p.Tasks), UniqueForUS: us}
		if deps != nil {
			row.AfterDeps, row.AfterPending = deps[i].rows, deps[i].pending
		}
		runs = append(runs, row)
		if _, ok := templates[p.Workflow]; !ok {
			templates[p.Workflow] = p.Tasks
		}
	}
	var tasks []taskInsertRow
	for wf, ts := range templates {
		for _, t := range ts {
			tasks = append(tasks, taskInsertRow{taskTemplateRow: templateRow(t), Workflow: wf})
		}
	}
	runsJSON, err := json.Marshal(runs)
	if err != nil {
		return nil, err
	}
	tasksJSON, err := json.Marshal(tasks)
	if err != nil {
		return nil, err
	}
	var rows []struct {
		RunInserted
		Notified int `bun:"notified"`
	}
	err = s.scanPrepared(ctx, &rows, s.runInsertQuery(),
		s.schema+".runs", jsonArg(runsJSON), s.schema+".tasks", jsonArg(tasksJSON),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	if err != nil {
		return nil, err
	}
	var retry []int
	for _, r := range rows {
		if r.ID == 0 {
			retry = append(retry, r.Ord)
			continue
		}
		out[r.Ord] = r.RunInserted
	}
	return retry, nil
}

func (s *Store) runInsertQuery() string {
	if s.noWake {
		return s.query("RunInsertQuiet")
	}
	return s.query("RunInsert")
}

// WithoutWake returns a copy of the store whose run inserts
// (RunInsertMany) do not announce the queues of their ready tasks on the
// ready channel: the caller does after the commit, with ReadyNotify. A
// NOTIFY in a transaction serializes its commit with every other
// notifying commit of the cluster; an engine that enqueues from many
// goroutines at once sends one announcement for many enqueues instead
// (see engine's waker). Not for a store bound to the caller's
// transaction, whose commit the caller cannot announce after.
func (s *Store) WithoutWake() *Store {
	c := *s
	c.noWake = true
	return &c
}

// ReadyNotify announces queues on the ready channel, in a transaction of
// its own.
func (s *Store) ReadyNotify(ctx context.Context, queues []string) error {
	if _, err := s.exec(ctx, `SELECT pg_notify(?, q) FROM unnest(?::text[]) q`, s.ReadyChannel(), array(queues)); err != nil {
		return fmt.Errorf("announce ready queues %v: %w", queues, err)
	}
	return nil
}

// runRefreshSQL recounts the tasks of runs and stores the counters and
// the status they imply, one run at a time (a lateral index lookup per
// run, whatever the table statistics say).
var runRefreshSQL = `
UPDATE ?schema.runs r SET ` + runSet("c.done", "c.failed", "c.cancelled", "c.interrupted", "c.started", "c.first_start") + `
FROM (
	SELECT rr.id, c.* FROM ?schema.runs rr CROSS JOIN LATERAL (
		SELECT count(*) FILTER (WHERE status IN ` + doneStates + `) AS done,
			count(*) FILTER (WHERE status = 'failed') AS failed,
			count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
			count(*) FILTER (WHERE status = 'interrupted') AS interrupted,
			coalesce(bool_or(status NOT IN ('not_started', 'ready') OR attempt > 0), false) AS started,
			min(coalesce(first_started_at, started_at)) AS first_start
		FROM ?schema.tasks t WHERE t.id = ANY(rr.task_ids)
	) c
	WHERE rr.id = ANY(?::bigint[])
) c
WHERE r.id = c.id`

// clearRunFast makes the fast runs among runIDs (see migration 019)
// ordinary runs, whose transitions write their rows, and returns their
// ids. The update takes each task's row lock, as a transition does: a
// transition in flight commits first, one that comes after writes the
// run row. It must come before tx locks any run row, in the order a
// transition takes its locks (task, then run).
func (tx *Store) clearRunFast(ctx context.Context, runIDs []int64) ([]int64, error) {
	var fast []int64
	err := tx.raw(`UPDATE ?schema.tasks SET run_fast = false WHERE id = ANY(`+runsTaskIDs("?::bigint[]")+`) AND run_fast RETURNING run_id`,
		array(runIDs)).Scan(ctx, &fast)
	if err != nil {
		return nil, fmt.Errorf("clear fast runs: %w", err)
	}
	return fast, nil
}

// runMaterialize makes the fast runs among runIDs ordinary runs and
// stores in their rows what cairn_runs reads, so that what follows in tx
// can read and lock the run rows as they are. The run rows read the same
// before and after. It must come before tx locks any run row.
func (tx *Store) runMaterialize(ctx context.Context, runIDs []int64) error {
	fast, err := tx.clearRunFast(ctx, runIDs)
	if err != nil || len(fast) == 0 {
		return err
	}
	_, err = tx.exec(ctx, `
UPDATE ?schema.runs r SET status = v.status, done_tasks = v.done_tasks, failed_tasks = v.failed_tasks,
	cancelled_tasks = v.cancelled_tasks, interrupted_tasks = v.interrupted_tasks,
	started_at = v.started_at, finished_at = v.finished_at, updated_at = v.updated_at
FROM ?schema.cairn_runs v
WHERE v.id = r.id AND r.id = ANY(?::bigint[])`, array(fast))
	if err != nil {
		return fmt.Errorf("store fast runs: %w", err)
	}
	return nil
}

// RunRefresh recounts the tasks of the given runs and stores their
// counters and status, fast runs (see runMaterialize) made ordinary. It
// locks the run rows first, in id order, and counts in a later statement:
// a transition of one of their tasks that commits meanwhile then either
// is counted here or adds its deltas after. A run it finishes that others
// wait for releases their roots.
func (s *Store) RunRefresh(ctx context.Context, runIDs []int64) error {
	if len(runIDs) == 0 {
		return nil
	}
	return s.InTx(ctx, func(tx *Store) error {
		if _, err := tx.clearRunFast(ctx, runIDs); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `SELECT id FROM ?schema.runs WHERE id = ANY(?::bigint[]) ORDER BY id FOR UPDATE`, array(runIDs)); err != nil {
			return fmt.Errorf("lock runs: %w", err)
		}
		var rows []struct {
			ID     int64 `bun:"id"`
			Settle bool  `bun:"settle"`
		}
		if err := tx.raw(runRefreshSQL+` RETURNING r.id, `+settleCond+` AS settle`, array(runIDs)).Scan(ctx, &rows); err != nil {
			return fmt.Errorf("refresh run status: %w", err)
		}
		var settle []int64
		for _, r := range rows {
			if r.Settle {
				settle = append(settle, r.ID)
			}
		}
		_, err := tx.releaseAll(ctx, nil, settle)
		return err
	})
}

// RunGet returns one run.
func (s *Store) RunGet(ctx context.Context, id int64) (*Run, error) {
	var r Run
	if err := s.raw(`SELECT * FROM ?schema.cairn_runs WHERE id = ?`, id).Scan(ctx, &r); err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// RunIsFinished reports whether a run in status s has finished:
// completed, failed or cancelled.
func RunIsFinished(s string) bool {
	switch s {
	case RunCompleted, RunFailed, RunCancelled:
		return true
	}
	return false
}

// RunSetPaused pauses or resumes a run that has not finished and refreshes
// its status. It returns the status the run had and whether it changed the
// run: false (and no error) for a finished run, which it leaves alone. The
// check and the change hold the run's row lock in one transaction. It
// returns ErrNotFound for an unknown run.
func (s *Store) RunSetPaused(ctx context.Context, id int64, paused bool) (string, bool, error) {
	var status string
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.runMaterialize(ctx, []int64{id}); err != nil {
			return err
		}
		if err := tx.raw(`SELECT status FROM ?schema.runs WHERE id = ? FOR UPDATE`, id).Scan(ctx, &status); err != nil {
			return fmt.Errorf("lock run %d: %w", id, notFound(err))
		}
		if RunIsFinished(status) {
			return nil
		}
		if _, err := tx.exec(ctx, `UPDATE ?schema.runs SET paused = ?, updated_at = now() WHERE id = ?`, paused, id); err != nil {
			return fmt.Errorf("pause run %d: %w", id, err)
		}
		if !paused {
			// Wake workers: its ready tasks are claimable again.
			if _, err := tx.exec(ctx, readyNotifyByRun,
				s.ReadyChannel(), id); err != nil {
				return err
			}
		}
		return tx.RunRefresh(ctx, []int64{id})
	})
	if err != nil {
		return "", false, err
	}
	return status, !RunIsFinished(status), nil
}

// oldTasksCTE is the CTE ot: one row, ids, the array of the ids of the
// tasks of the runs of a CTE named old (see runTaskIDs), read once for
// the deletes that match them; oldTaskIDs is that array.
const (
	oldTasksCTE = `ot AS (
	SELECT ARRAY(SELECT unnest(r.task_ids) FROM ?schema.runs r WHERE r.id IN (SELECT id FROM old)) AS ids
), `
	oldTaskIDs = `(SELECT ids FROM ot)::bigint[]`
)

// deleteRunsCTEs delete the runs of a CTE named old (ids) with their
// tasks' history (events, steps, signals, log lines; the tasks go with
// their run), as d (the deleted ids). Events are matched with = ANY of an
// array, not IN: over task_events' many partitions the planner would
// rather hash every partition whole than probe each one's index by task.
const deleteRunsCTEs = oldTasksCTE + `e AS (
	DELETE FROM ?schema.task_events WHERE task_id = ANY(` + oldTaskIDs + `)
), ` + deleteRunDataCTEs

// pruneEventsCTEs delete the events of the runs of old that no partition
// drop will take: those since the cutoff (the first ? and the second, in
// milliseconds before now), and those of the DEFAULT partition. Older
// events are in daily partitions that end before the cutoff or within a
// day of it: HistoryPartitionDrop drops them whole, without a dead tuple.
// A run of old finished before the cutoff, so its events since then are
// within the hour after it (historyRunMargin: a transaction's time is
// when it began): the bound keeps the delete out of the partitions
// written to now, which have no B-tree by task (see
// HistoryPartitionIndex).
const pruneEventsCTEs = oldTasksCTE + `e AS (
	DELETE FROM ?schema.task_events WHERE at >= now() - ? * interval '1 millisecond'
		AND at < now() - ? * interval '1 millisecond' + interval '1 hour'
		AND task_id = ANY(` + oldTaskIDs + `)
), ed AS (
	DELETE FROM ?schema.task_events_default WHERE at < now() - ? * interval '1 millisecond'
		AND task_id = ANY(` + oldTaskIDs + `)
), `

// deleteRunDataCTEs delete the runs of old with their tasks' steps,
// signals and log lines, as d (the deleted ids); ot must come before
// (deleteRunsCTEs and pruneEventsCTEs start with it).
const deleteRunDataCTEs = `st AS (
	DELETE FROM ?schema.task_steps WHERE task_id = ANY(` + oldTaskIDs + `)
), sg AS (
	DELETE FROM ?schema.task_signals WHERE task_id = ANY(` + oldTaskIDs + `)
), lg AS (
	DELETE FROM ?schema.task_logs WHERE task_id = ANY(` + oldTaskIDs + `)
), d AS (
	DELETE FROM ?schema.runs WHERE id IN (SELECT id FROM old)
	RETURNING id
)`

// RunPrune deletes runs (with their tasks and events) that finished more
// than olderThan ago, batch at a time, and returns how many. A run whose
// uniqueness window (UniqueFor) still holds is kept until it ends, so its
// key keeps returning it; a pruned run frees its key.
//
// Each batch starts where the one before ended, in (created_at, id)
// order, rather than at the oldest run: the index entries of the runs it
// deleted stay in runs_created until a vacuum, and a scan from the start
// would step over all of them again, batch after batch (a month of
// history slowed from 14,000 to 7,800 runs/s within 9M runs that way).
// Runs it passes over (unfinished, or unique for longer) are looked at
// again by the next call.
func (s *Store) RunPrune(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	var after pruneCursor // zero: before every run
	for {
		// Tasks go by their foreign key's cascade; events, steps, signals
		// and logs have none (see migrations 003, 011 and 014) and go here, by
		// their tasks (see migration 007); events older than the cutoff are
		// left to HistoryPartitionDrop (see pruneEventsCTEs).
		// A run that finished before the cutoff was created before it, so
		// runs_created bounds the scan.
		var r struct {
			N    int64      `bun:"n"`
			Last *time.Time `bun:"last_at"`
			ID   *int64     `bun:"last_id"`
		}
		// Without JIT: see RunListFiltered.
		err := s.withoutJIT(ctx, false, func(tx *Store) error {
			return tx.raw(`
WITH old AS (
	SELECT id, created_at FROM ?schema.cairn_runs
	WHERE created_at < now() - ? * interval '1 millisecond' AND (created_at, id) > (?::timestamptz, ?::bigint)
		AND finished_at < now() - ? * interval '1 millisecond'
		AND (unique_until IS NULL OR unique_until <= now())
	ORDER BY created_at, id LIMIT ?
), `+pruneEventsCTEs+deleteRunDataCTEs+`
SELECT (SELECT count(*) FROM d) AS n, l.created_at AS last_at, l.id AS last_id
FROM (SELECT 1) one LEFT JOIN (SELECT created_at, id FROM old ORDER BY created_at DESC, id DESC LIMIT 1) l ON true`,
				olderThan.Milliseconds(), after.At, after.ID, olderThan.Milliseconds(), batch,
				olderThan.Milliseconds(), olderThan.Milliseconds(), olderThan.Milliseconds()).Scan(ctx, &r)
		})
		if err != nil {
			return total, fmt.Errorf("prune runs: %w", err)
		}
		total += r.N
		if r.N < int64(batch) || r.Last == nil || r.ID == nil {
			return total, nil
		}
		after = pruneCursor{At: *r.Last, ID: *r.ID}
	}
}

// pruneCursor is where RunPrune's next batch starts: after this run in
// (created_at, id) order.
type pruneCursor struct {
	At time.Time
	ID int64
}
