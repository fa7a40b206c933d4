package engine

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairnhq/cairn/store"
)

// Run is an enqueued run.
type Run struct {
	ID       int64
	Workflow string
	// Existing is true when the idempotency key was held (by a live run,
	// or within the window of WithUniqueFor), and that run is returned
	// instead of a new one.
	Existing bool
}

// EnqueueOption adjusts one Enqueue.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	key       *string
	uniqueFor *time.Duration
	priority  *int
	queue     string
	runAt     *time.Time
	after     []int64
	afterRule *TriggerRule
}

// WithKey sets an idempotency key: while a run with the same key is not
// finished, or within the window of one enqueued with WithUniqueFor,
// enqueueing again returns that run.
func WithKey(key string) EnqueueOption { return func(o *enqueueOptions) { o.key = &key } }

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
	return func(o *enqueueOptions) { o.uniqueFor = &d }
}

// WithPriority sets the priority of the run's tasks (lower runs first).
func WithPriority(p int) EnqueueOption { return func(o *enqueueOptions) { o.priority = &p } }

// WithQueue puts the run's tasks (those that name no queue) on queue.
func WithQueue(queue string) EnqueueOption { return func(o *enqueueOptions) { o.queue = queue } }

// WithRunAt makes the run's first tasks claimable only from t on.
func WithRunAt(t time.Time) EnqueueOption { return func(o *enqueueOptions) { o.runAt = &t } }

// MaxAfter is how many runs one run can wait for (WithAfter).
const MaxAfter = 1000

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
	return func(o *enqueueOptions) { o.after = append(o.after, ids...) }
}

// WithAfterRule sets the trigger rule of the root tasks of a run enqueued
// WithAfter, in place of the roots' own rules: a shorthand (AllSuccess,
// AllDone, OneFailed, NoneFailed) or All/Any/None over RunSucceeded(id),
// RunFailed(id) of the awaited runs and Context conditions on the run
// input.
func WithAfterRule(rule TriggerRule) EnqueueOption {
	return func(o *enqueueOptions) { o.afterRule = &rule }
}

// EnqueueParams is one run of EnqueueMany.
type EnqueueParams struct {
	Workflow string
	Input    any
	Options  []EnqueueOption
}

// Enqueue starts a run of workflow with input (a JSON object: a struct, a
// map, json.RawMessage or []byte). When ctx carries an Actor (see
// WithActor) the enqueue is an admin action: recorded on the tasks'
// creation events and logged.
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
	ps := make([]store.RunInsertParams, len(runs))
	var extraQueues []string
	var detail json.RawMessage
	if _, ok := ActorFrom(ctx); ok {
		detail = actionDetail(ctx, "enqueued")
	}
	for i, r := range runs {
		p, err := e.prepare(r)
		if err != nil {
			if len(runs) > 1 {
				return nil, fmt.Errorf("run %d: %w", i, err)
			}
			return nil, err
		}
		p.Detail = detail
		if p.Queue != "" {
			extraQueues = append(extraQueues, p.Queue)
		}
		ps[i] = p
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
		inline := e.waker.begin()
		if !inline {
			ins = st.WithoutWake()
		}
		defer func() { e.waker.end(readyQueues(ps), inline, err == nil) }()
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

// readyQueues returns the queues of the tasks of ps that may be ready at
// insert (the roots), each once.
func readyQueues(ps []store.RunInsertParams) []string {
	var qs []string
	for _, p := range ps {
		for _, t := range p.Tasks {
			if len(t.Deps) > 0 {
				continue
			}
			q := cmp.Or(t.Queue, p.Queue)
			if !slices.Contains(qs, q) {
				qs = append(qs, q)
			}
		}
	}
	return qs
}

// knownShown is how many known workflows an unknown workflow's error
// names.
const knownShown = 20

// unknownWorkflow is the error of an enqueue of a workflow not in known
// (sorted): it names the known ones, so that a typo shows at once.
func unknownWorkflow(name string, known []string) error {
	switch {
	case len(known) == 0:
		return fmt.Errorf("%w %q: no workflow is registered", ErrUnknownWorkflow, name)
	case len(known) > knownShown:
		return fmt.Errorf("%w %q; known workflows: %s, and %d more", ErrUnknownWorkflow, name, strings.Join(known[:knownShown], ", "), len(known)-knownShown)
	}
	return fmt.Errorf("%w %q; known workflows: %s", ErrUnknownWorkflow, name, strings.Join(known, ", "))
}

// prepare validates one run and builds its insert parameters.
func (e *Engine) prepare(r EnqueueParams) (store.RunInsertParams, error) {
	if r.Workflow == "" {
		return store.RunInsertParams{}, fmt.Errorf("%w: workflow is required", ErrInvalidInput)
	}
	if err := checkText("workflow", r.Workflow); err != nil {
		return store.RunInsertParams{}, err
	}
	def, ok := e.workflow(r.Workflow)
	if !ok {
		return store.RunInsertParams{}, unknownWorkflow(r.Workflow, e.Workflows())
	}
	input, err := e.encodeInput(r.Input)
	if err != nil {
		return store.RunInsertParams{}, fmt.Errorf("workflow %q: %w", r.Workflow, err)
	}
	if def.keyed {
		if err := checkFlowKeys(def, input); err != nil {
			return store.RunInsertParams{}, fmt.Errorf("workflow %q: %w", r.Workflow, err)
		}
	}
	var o enqueueOptions
	for _, opt := range r.Options {
		opt(&o)
	}
	if o.queue != "" {
		if err := checkName("queue", o.queue); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.key != nil {
		if *o.key == "" || len(*o.key) > 512 {
			return store.RunInsertParams{}, fmt.Errorf("%w: key: idempotency key must be 1-512 bytes", ErrInvalidInput)
		}
		if err := checkText("key", *o.key); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.uniqueFor != nil {
		if *o.uniqueFor <= 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: unique_for: window %s must be positive", ErrInvalidInput, *o.uniqueFor)
		}
		if o.key == nil {
			return store.RunInsertParams{}, fmt.Errorf("%w: unique_for: needs a key (WithKey): the window keeps a key held", ErrInvalidInput)
		}
	}
	if o.priority != nil {
		if err := checkInt32("priority", *o.priority); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.runAt != nil {
		if err := checkTime("run_at", *o.runAt); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	var afterRule json.RawMessage
	if len(o.after) > MaxAfter {
		return store.RunInsertParams{}, fmt.Errorf("%w: after: %d runs; at most %d", ErrInvalidInput, len(o.after), MaxAfter)
	}
	for _, id := range o.after {
		if id <= 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: after: run id %d must be positive", ErrInvalidInput, id)
		}
	}
	if o.afterRule != nil {
		if len(o.after) == 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: after_rule: needs after (WithAfter): the runs it speaks of", ErrInvalidInput)
		}
		var err error
		if afterRule, err = o.afterRule.ForAfter(o.after); err != nil {
			return store.RunInsertParams{}, fmt.Errorf("%w: after_rule: %w", ErrInvalidInput, err)
		}
	}
	queue := o.queue
	if queue == "" {
		queue = def.wf.Queue
	}
	if queue == "" {
		queue = DefaultQueue
	}
	p := store.RunInsertParams{Workflow: r.Workflow, Input: input, Key: o.key, Queue: queue, AvailableAt: o.runAt, Tasks: def.templates,
		After: o.after, AfterRule: afterRule}
	if o.queue != "" {
		p.Queue = o.queue
	}
	if o.priority != nil {
		p.Priority = *o.priority
	}
	if o.uniqueFor != nil {
		p.UniqueFor = *o.uniqueFor
	}
	return p, nil
}

// encodeInput turns input into a JSON object within the size limit.
func (e *Engine) encodeInput(input any) (json.RawMessage, error) {
	var b []byte
	switch v := input.(type) {
	case nil:
		b = []byte("{}")
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidInput, err)
		}
	}
	if len(b) > e.cfg.MaxInputBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrInputTooLarge, len(b), e.cfg.MaxInputBytes)
	}
	trimmed := bytes.TrimSpace(b)
	if !utf8.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidInput)
	}
	if !json.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrInvalidInput)
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: must be a JSON object", ErrInvalidInput)
	}
	// \u0000, lone surrogates and numbers beyond numeric's range.
	if err := store.CheckJSON(trimmed); err != nil {
		return nil, fmt.Errorf("%w: input %w", ErrInvalidInput, err)
	}
	return trimmed, nil
}
