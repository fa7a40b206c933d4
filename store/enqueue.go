package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/cairnhq/cairn/store/check"
)

// This file holds the enqueue: the insert of runs with their tasks
// (RunInsertMany). Its statement is the function run_insert of migration
// 035 (called in sql/functions.sql).

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

// taskTemplateRow is a TaskTemplate as the run insert (sql/run_insert.sql) reads it.
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
	// which sees these runs as rule.Deps with Run set) once every one of
	// them has finished. Unknown ids fail the insert with ErrUnknownRun.
	After []int64 `json:"-"`
	// AfterRule, when set, replaces the trigger rule of the root tasks of
	// a run with After.
	AfterRule json.RawMessage `json:"after_rule,omitempty"`
	// TraceContext, when set, is the W3C trace context of the span that
	// enqueued the run (see Run.TraceContext).
	TraceContext *string `json:"trace_context,omitempty"`
	// Version, when set, is the workflow version the run is created with
	// (run_rows.version, and each task's for the claim's routing): Tasks
	// are that version's.
	Version *string `json:"version,omitempty"`
	// Debounce, when set, makes the insert replace the queued run of its
	// key instead (see Debounce).
	Debounce *Debounce `json:"-"`
}

// check returns ErrInvalidValue, naming the field, when PostgreSQL could
// not take p: its values travel inside a jsonb document, where the
// per-argument check sees only the whole.
func (p *RunInsertParams) check() error {
	for _, f := range []struct{ name, v string }{{"workflow", p.Workflow}, {"queue", p.Queue}, {"key", deref(p.Key)}} {
		if err := check.Text(f.v); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidValue, f.name, err)
		}
	}
	if err := CheckJSON(p.Input); err != nil {
		return fmt.Errorf("%w: input: %w", ErrInvalidValue, err)
	}
	if p.UniqueFor < 0 || (p.UniqueFor > 0 && p.Key == nil) {
		return fmt.Errorf("%w: unique_for %s: must be positive and come with a key", ErrInvalidValue, p.UniqueFor)
	}
	if d := p.Debounce; d != nil {
		if err := check.Text(d.Key); err != nil || d.Key == "" {
			return fmt.Errorf("%w: debounce key %q: must be non-empty text", ErrInvalidValue, d.Key)
		}
		if !d.Singleton && (d.Wait < 0 || d.MaxWait < d.Wait) {
			return fmt.Errorf("%w: debounce wait %s, max wait %s: need 0 <= wait <= max wait", ErrInvalidValue, d.Wait, d.MaxWait)
		}
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
	Version  string `json:"version"` // "": none
}

// RunInsertMany inserts runs with all their task rows (roots ready, the
// rest not_started) in one statement; a creation event only for runs
// whose params carry a Detail (who enqueued). A run
// whose idempotency key is held is not inserted; the holder is returned
// with Existing set. A key is held by a live run with that key and, for
// UniqueFor after its creation, by a run inserted with UniqueFor, whatever
// its state. Results are in the order of ps.
func (s *Store) RunInsertMany(ctx context.Context, ps []RunInsertParams) ([]RunInserted, error) {
	after, debounce := false, false
	for i := range ps {
		if err := ps[i].check(); err != nil {
			return nil, fmt.Errorf("insert runs: run %d: %w", i, err)
		}
		after = after || len(ps[i].After) > 0
		debounce = debounce || ps[i].Debounce != nil
	}
	if debounce {
		return s.runInsertDebounced(ctx, ps)
	}
	if after {
		return s.runInsertAfter(ctx, ps)
	}
	return s.runInsertMany(ctx, ps, nil)
}

// runInsertMany inserts ps (see RunInsertMany); deps, when set, are the
// run dependencies of each (see runInsertAfter). The statement is the
// function run_insert (migration 035), which the SQL API's enqueue calls
// too: it tries again a run whose key a run it could not see took.
func (s *Store) runInsertMany(ctx context.Context, ps []RunInsertParams, deps []runDeps) ([]RunInserted, error) {
	runs, templates, err := runInsertArgs(ps, deps)
	if err != nil {
		return nil, fmt.Errorf("insert runs: %w", err)
	}
	rows := make([]RunInserted, 0, len(ps))
	if err := s.scanPrepared(ctx, &rows, s.query("RunInsert"), jsonArg(runs), jsonArg(templates), !s.noWake); err != nil {
		return nil, fmt.Errorf("insert runs: %w", err)
	}
	out := make([]RunInserted, len(ps))
	for _, r := range rows {
		out[r.Ord] = r
	}
	return out, nil
}

// runInsertArgs are the arguments of run_insert for ps: the runs
// (runInsertRow) and the templates of each workflow and version once
// (taskInsertRow), as JSON.
func runInsertArgs(ps []RunInsertParams, deps []runDeps) (runsJSON, tasksJSON []byte, err error) {
	runs := make([]runInsertRow, 0, len(ps))
	type shape struct{ workflow, version string }
	templates := map[shape][]TaskTemplate{}
	for i, p := range ps {
		us := int64((p.UniqueFor + time.Microsecond - 1) / time.Microsecond)
		row := runInsertRow{RunInsertParams: p, Ord: i, TaskCount: len(p.Tasks), UniqueForUS: us}
		if deps != nil {
			row.AfterDeps, row.AfterPending = deps[i].rows, deps[i].pending
		}
		runs = append(runs, row)
		if k := (shape{p.Workflow, deref(p.Version)}); templates[k] == nil {
			templates[k] = p.Tasks
		}
	}
	var tasks []taskInsertRow
	for k, ts := range templates {
		for _, t := range ts {
			tasks = append(tasks, taskInsertRow{taskTemplateRow: templateRow(t), Workflow: k.workflow, Version: k.version})
		}
	}
	if runsJSON, err = json.Marshal(runs); err != nil {
		return nil, nil, err
	}
	if tasksJSON, err = json.Marshal(tasks); err != nil {
		return nil, nil, err
	}
	return runsJSON, tasksJSON, nil
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
