package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
)

// Run is an enqueued run.
type Run struct {
	ID       int64
	Workflow string
	// Existing is true when the key was held (WithKey: by a live run or
	// within the window of WithUniqueFor; WithDebounce, WithSingleton: by
	// a run not started, whose input this enqueue replaced), and that run
	// is returned instead of a new one.
	Existing bool
}

// EnqueueOption adjusts one Enqueue.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions = define.Options

// WithKey sets an idempotency key: while a run with the same key is not
// finished, or within the window of one enqueued with WithUniqueFor,
// enqueueing again returns that run.
func WithKey(key string) EnqueueOption { return func(o *enqueueOptions) { o.Key = &key } }

// WithUniqueFor, with WithKey, keeps the key for d after the run is
// created (by the database clock), whatever the run's state: enqueueing
// with the key meanwhile, with or without WithUniqueFor, returns that run
// (Existing true), also after it completed or failed. A run still live
// when d has passed keeps its key until it finishes, as with WithKey
// alone. The window is the one given when the run was created; an
// enqueue that finds the key held returns the holder whatever its own d.
// d must be positive, and WithKey is required (ErrInvalidInput naming
// unique_for otherwise). A finished run is not pruned while its window
// holds.
func WithUniqueFor(d time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.UniqueFor = &d }
}

// WithDebounce: while the run of key has not started, enqueueing with key
// replaces its input and moves its start to now + wait, never past maxWait
// after its first enqueue (store.Debounce; Existing true).
func WithDebounce(key string, wait, maxWait time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.Debounce = &store.Debounce{Key: key, Wait: wait, MaxWait: maxWait} }
}

// WithSingleton: while the run of key has not started, enqueueing with key
// replaces its input (the newest wins; Existing true).
func WithSingleton(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.Debounce = &store.Debounce{Key: key, Singleton: true} }
}

// WithPriority sets the priority of the run's tasks (lower runs first).
func WithPriority(p int) EnqueueOption { return func(o *enqueueOptions) { o.Priority = &p } }

// WithQueue puts the run's tasks (those that name no queue) on queue.
func WithQueue(queue string) EnqueueOption { return func(o *enqueueOptions) { o.Queue = queue } }

// WithRunAt makes the run's first tasks claimable only from t on.
func WithRunAt(t time.Time) EnqueueOption { return func(o *enqueueOptions) { o.RunAt = &t } }

// MaxAfter is how many runs one run can wait for (WithAfter).
const MaxAfter = define.MaxAfter

// WithAfter makes the run's root tasks wait until runs ids have
// finished (completed, failed or cancelled): they stay not_started, then
// their trigger rule decides, with those runs as their dependencies, as
// a task's rule decides with its dependency tasks: AllSuccess (the
// default) runs them only when every run completed, else they are skipped
// (and the tasks after them, by their own rules); AllDone runs them
// whatever the outcome; OneFailed when one failed; NoneFailed when none
// failed or was cancelled. A root's own rule from the workflow applies,
// or the rule given by WithAfterRule, which may name the runs with
// RunSucceeded and RunFailed.
//
// The dependency is written in the run's transaction, under a lock on
// the awaited runs' rows: a run that finishes meanwhile is either seen
// finished by the enqueue or counts the new run down when it finishes,
// in its own transaction. A run that has already finished counts with
// its final status. Each awaited run counts once, when it first finishes
// (a failed run retried later does not decide again). Unknown ids are
// refused with ErrUnknownRun (also ErrInvalidInput), naming them.
// WithAfter may be given more than once; ids add up (at most MaxAfter).
// While an awaited run has not finished, its finishing transaction waits
// for the enqueue's, as for any lock: keep an EnqueueTx transaction short.
func WithAfter(ids ...int64) EnqueueOption {
	return func(o *enqueueOptions) { o.After = append(o.After, ids...) }
}

// WithAfterRule sets the trigger rule of the root tasks of a run enqueued
// WithAfter, in place of the roots' own rules: a shorthand (AllSuccess,
// AllDone, OneFailed, NoneFailed) or All/Any/None over RunSucceeded(id),
// RunFailed(id) of the awaited runs and Context conditions on the run
// input.
func WithAfterRule(rule TriggerRule) EnqueueOption {
	return func(o *enqueueOptions) { o.AfterRule = &rule }
}

// EnqueueParams is one run of EnqueueMany.
type EnqueueParams struct {
	Workflow string
	Input    any
	Options  []EnqueueOption
}

// Enqueue starts a run of workflow with input (a JSON object: a struct, a
// map, json.RawMessage or []byte), of the version registered here, else
// of the one last registered anywhere (see Workflow.Version). When ctx
// carries an Actor (see WithActor) the enqueue is an admin action:
// recorded on the tasks' creation events and logged.
func (e *Engine) Enqueue(ctx context.Context, workflow string, input any, opts ...EnqueueOption) (run *Run, err error) {
	if _, ok := ActorFrom(ctx); ok {
		defer func() {
			if err == nil {
				e.audit(ctx, &err, "enqueue", slog.String("workflow", workflow), slog.Int64("run", run.ID), slog.Bool("existing", run.Existing))
			}
		}()
	}
	return e.enqueueOne(ctx, e.st, workflow, input, opts)
}

// EnqueueTx is Enqueue inside the caller's transaction: the run exists
// when, and only if, tx commits.
func (e *Engine) EnqueueTx(ctx context.Context, tx *sql.Tx, workflow string, input any, opts ...EnqueueOption) (*Run, error) {
	return e.enqueueOne(ctx, e.st.WithTx(tx), workflow, input, opts)
}

// EnqueueMany starts many runs in one round trip. Nothing is written when
// any of them is invalid.
func (e *Engine) EnqueueMany(ctx context.Context, runs []EnqueueParams) ([]*Run, error) {
	return e.enqueue(ctx, e.st, runs)
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction.
func (e *Engine) EnqueueManyTx(ctx context.Context, tx *sql.Tx, runs []EnqueueParams) ([]*Run, error) {
	return e.enqueue(ctx, e.st.WithTx(tx), runs)
}

func (e *Engine) enqueueOne(ctx context.Context, st *store.Store, workflow string, input any, opts []EnqueueOption) (*Run, error) {
	out, err := e.enqueue(ctx, st, []EnqueueParams{{Workflow: workflow, Input: input, Options: opts}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func (e *Engine) enqueue(ctx context.Context, st *store.Store, runs []EnqueueParams) (out []*Run, err error) {
	if len(runs) == 0 {
		return nil, nil
	}
	var detail json.RawMessage
	if _, ok := ActorFrom(ctx); ok {
		detail = actionDetail(ctx, "enqueued")
	}
	stored := &define.Stored{Read: st.WorkflowVersionLatest, Known: e.Workflows}
	ps, extraQueues, err := define.PrepareAll(len(runs), func(i int) (store.RunInsertParams, error) {
		return e.prepare(ctx, runs[i], stored)
	}, detail)
	if err != nil {
		return nil, err
	}
	ctx, end := e.tr.enqueue(ctx, ps)
	defer func() { end(out, err) }()
	if len(extraQueues) > 0 {
		if err := st.QueueEnsure(ctx, extraQueues); err != nil {
			return nil, err
		}
	}
	// Outside the caller's transaction, an enqueue concurrent with another
	// of this process is announced after its commit (see waker).
	ins := st
	if st == e.st {
		inline := e.waker.Begin()
		if !inline {
			ins = st.WithoutWake()
		}
		defer func() { e.waker.End(define.ReadyQueues(ps), inline, err == nil) }()
	}
	res, err := ins.RunInsertMany(ctx, ps)
	if errors.Is(err, store.ErrInvalidValue) || errors.Is(err, ErrUnknownRun) {
		return nil, fmt.Errorf("enqueue: %w: %w", ErrInvalidInput, err)
	}
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	out = make([]*Run, len(res))
	for i, r := range res {
		out[i] = &Run{ID: r.ID, Workflow: runs[i].Workflow, Existing: r.Existing}
	}
	return out, nil
}

// prepare validates one run and builds its insert parameters
// (define.Rules.Prepare), of the registered version of its workflow or,
// for one this process did not register, of its stored version.
func (e *Engine) prepare(ctx context.Context, r EnqueueParams, stored *define.Stored) (p store.RunInsertParams, err error) {
	if err := rules.CheckWorkflow(r.Workflow); err != nil {
		return p, err
	}
	var run define.Run
	if def, ok := e.workflow(r.Workflow); ok {
		run = define.Run{Workflow: r.Workflow, Queue: def.wf.Queue, Templates: def.templates, Keyed: def.keyed, Version: def.stored.Version}
	} else if run, err = rules.StoredRun(ctx, stored, r.Workflow); err != nil {
		return p, err
	}
	run.Input = r.Input
	for _, opt := range r.Options {
		opt(&run.Options)
	}
	return e.inputRules().Prepare(run)
}
