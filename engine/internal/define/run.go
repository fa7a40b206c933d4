package define

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
	"github.com/cairnhq/cairn/store/rule"
)

// MaxAfter is how many runs one run can wait for.
const MaxAfter = 1000

// Options are the options of one enqueue (the engine's With* options
// set them).
type Options struct {
	Key       *string
	UniqueFor *time.Duration
	Priority  *int
	Queue     string
	RunAt     *time.Time
	After     []int64
	AfterRule *rule.Rule
	// Debounce is set by WithDebounce and WithSingleton.
	Debounce *store.Debounce
}

// Run is one run to prepare: its registered workflow's queue and
// templates, its input as given and its options.
type Run struct {
	Workflow string
	// Queue is the workflow's declared queue, "" for none.
	Queue     string
	Templates []store.TaskTemplate
	// Keyed is set when a task of the workflow has a concurrency or rate
	// limit (Def.Keyed).
	Keyed   bool
	Input   any
	Options Options
	// Version is the workflow's version the run is created with ("":
	// none).
	Version string
}

// CheckWorkflow returns ErrInvalidInput unless a run names a workflow in
// text PostgreSQL can store.
func (r Rules) CheckWorkflow(name string) error {
	if name == "" {
		return fmt.Errorf("%w: workflow is required", r.ErrInvalidInput)
	}
	return r.Text("workflow", name)
}

// knownShown is how many known workflows an unknown workflow's error
// names.
const knownShown = 20

// UnknownWorkflow is the error (ErrUnknownWorkflow) of an enqueue of a
// workflow not in known (sorted): it names the known ones, so that a typo
// shows at once.
func (r Rules) UnknownWorkflow(name string, known []string) error {
	switch {
	case len(known) == 0:
		return fmt.Errorf("%w %q: no workflow is registered", r.ErrUnknownWorkflow, name)
	case len(known) > knownShown:
		return fmt.Errorf("%w %q; known workflows: %s, and %d more", r.ErrUnknownWorkflow, name, strings.Join(known[:knownShown], ", "), len(known)-knownShown)
	}
	return fmt.Errorf("%w %q; known workflows: %s", r.ErrUnknownWorkflow, name, strings.Join(known, ", "))
}

// Prepare validates one run of a registered workflow and builds its
// insert parameters.
func (r Rules) Prepare(run Run) (store.RunInsertParams, error) {
	input, err := r.EncodeInput(run.Input)
	if err != nil {
		return store.RunInsertParams{}, fmt.Errorf("workflow %q: %w", run.Workflow, err)
	}
	if run.Keyed {
		if err := r.checkFlowKeys(run.Templates, input); err != nil {
			return store.RunInsertParams{}, fmt.Errorf("workflow %q: %w", run.Workflow, err)
		}
	}
	o := run.Options
	if o.Queue != "" {
		if err := r.Name("queue", o.Queue); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.Key != nil {
		if *o.Key == "" || len(*o.Key) > 512 {
			return store.RunInsertParams{}, fmt.Errorf("%w: key: idempotency key must be 1-512 bytes", r.ErrInvalidInput)
		}
		if err := r.Text("key", *o.Key); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.UniqueFor != nil {
		if *o.UniqueFor <= 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: unique_for: window %s must be positive", r.ErrInvalidInput, *o.UniqueFor)
		}
		if o.Key == nil {
			return store.RunInsertParams{}, fmt.Errorf("%w: unique_for: needs a key (WithKey): the window keeps a key held", r.ErrInvalidInput)
		}
	}
	if o.Priority != nil {
		if err := r.Int32("priority", *o.Priority); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if o.RunAt != nil {
		if err := r.Time("run_at", *o.RunAt); err != nil {
			return store.RunInsertParams{}, err
		}
	}
	if err := r.checkDebounce(run, o); err != nil {
		return store.RunInsertParams{}, err
	}
	var afterRule json.RawMessage
	if len(o.After) > MaxAfter {
		return store.RunInsertParams{}, fmt.Errorf("%w: after: %d runs; at most %d", r.ErrInvalidInput, len(o.After), MaxAfter)
	}
	for _, id := range o.After {
		if id <= 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: after: run id %d must be positive", r.ErrInvalidInput, id)
		}
	}
	if o.AfterRule != nil {
		if len(o.After) == 0 {
			return store.RunInsertParams{}, fmt.Errorf("%w: after_rule: needs after (WithAfter): the runs it speaks of", r.ErrInvalidInput)
		}
		var err error
		if afterRule, err = o.AfterRule.ForAfter(o.After); err != nil {
			return store.RunInsertParams{}, fmt.Errorf("%w: after_rule: %w", r.ErrInvalidInput, err)
		}
	}
	queue := o.Queue
	if queue == "" {
		queue = run.Queue
	}
	if queue == "" {
		queue = r.DefaultQueue
	}
	p := store.RunInsertParams{Workflow: run.Workflow, Input: input, Key: o.Key, Queue: queue, AvailableAt: o.RunAt, Tasks: run.Templates,
		After: o.After, AfterRule: afterRule}
	if run.Version != "" {
		p.Version = &run.Version
	}
	if o.Queue != "" {
		p.Queue = o.Queue
	}
	if o.Priority != nil {
		p.Priority = *o.Priority
	}
	if o.UniqueFor != nil {
		p.UniqueFor = *o.UniqueFor
	}
	p.Debounce = o.Debounce
	return p, nil
}

// checkDebounce validates the options of WithDebounce and WithSingleton:
// a key of 1-512 bytes, 0 <= wait <= maxWait, no run_at with a debounce
// (it sets the start), and no flow key read from the input (a replaced
// input would change the tasks' keys).
func (r Rules) checkDebounce(run Run, o Options) error {
	d := o.Debounce
	if d == nil {
		return nil
	}
	name := "debounce"
	if d.Singleton {
		name = "singleton"
	}
	if d.Key == "" || len(d.Key) > 512 {
		return fmt.Errorf("%w: %s: key must be 1-512 bytes", r.ErrInvalidInput, name)
	}
	if err := r.Text(name, d.Key); err != nil {
		return err
	}
	if !d.Singleton && (d.Wait < 0 || d.MaxWait < d.Wait) {
		return fmt.Errorf("%w: debounce: wait %s and max wait %s must satisfy 0 <= wait <= max wait", r.ErrInvalidInput, d.Wait, d.MaxWait)
	}
	if !d.Singleton && o.RunAt != nil {
		return fmt.Errorf("%w: debounce: sets the run's start; run_at is not allowed with it", r.ErrInvalidInput)
	}
	for _, t := range run.Templates {
		if (t.Concurrency != nil && len(t.Concurrency.Path) > 0) || (t.RateLimit != nil && len(t.RateLimit.Path) > 0) {
			return fmt.Errorf("%w: %s: task %q takes a flow key from the input, which a replaced input would change", r.ErrInvalidInput, name, t.Name)
		}
	}
	return nil
}

// EncodeInput turns input (a JSON object: a value to marshal,
// json.RawMessage, []byte or string) into a JSON object within
// MaxInputBytes that PostgreSQL's jsonb takes.
func (r Rules) EncodeInput(input any) (json.RawMessage, error) {
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
			return nil, fmt.Errorf("%w: %v", r.ErrInvalidInput, err)
		}
	}
	if len(b) > r.MaxInputBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", r.ErrInputTooLarge, len(b), r.MaxInputBytes)
	}
	trimmed := bytes.TrimSpace(b)
	if !utf8.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not valid UTF-8", r.ErrInvalidInput)
	}
	if !json.Valid(trimmed) {
		return nil, fmt.Errorf("%w: not valid JSON", r.ErrInvalidInput)
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: must be a JSON object", r.ErrInvalidInput)
	}
	// \u0000, lone surrogates and numbers beyond numeric's range.
	if err := check.JSON(trimmed); err != nil {
		return nil, fmt.Errorf("%w: input %w", r.ErrInvalidInput, err)
	}
	return trimmed, nil
}

// PrepareAll builds the insert parameters of n runs with prepare, each
// with detail (the tasks' creation event detail). A failing run is named
// by its index when there are several. It also returns the queues the
// runs' options name, for the caller to make sure they exist.
func PrepareAll(n int, prepare func(i int) (store.RunInsertParams, error), detail json.RawMessage) ([]store.RunInsertParams, []string, error) {
	ps := make([]store.RunInsertParams, n)
	var queues []string
	for i := range ps {
		p, err := prepare(i)
		if err != nil {
			if n > 1 {
				return nil, nil, fmt.Errorf("run %d: %w", i, err)
			}
			return nil, nil, err
		}
		p.Detail = detail
		if p.Queue != "" {
			queues = append(queues, p.Queue)
		}
		ps[i] = p
	}
	return ps, queues, nil
}

// ReadyQueues returns the queues of the tasks of ps that may be ready at
// insert (the roots), each once.
func ReadyQueues(ps []store.RunInsertParams) []string {
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

// The checks below name the field that was wrong and wrap ErrInvalidInput:
// names (1-64 of A-Z a-z 0-9 _ . : -), text (UTF-8 without NUL),
// numbers stored as 32-bit integers, times within years 1 to 9999 (the
// rules themselves are in package check).

// Name returns ErrInvalidInput unless name is a valid queue or schedule
// name (check.Name).
func (r Rules) Name(field, name string) error {
	if err := check.Name(name); err != nil {
		return fmt.Errorf("%w: %s %q: %w", r.ErrInvalidInput, field, name, err)
	}
	return nil
}

// Text returns ErrInvalidInput unless s is text PostgreSQL can store
// (check.Text).
func (r Rules) Text(field, s string) error {
	if err := check.Text(s); err != nil {
		return fmt.Errorf("%w: %s: %w", r.ErrInvalidInput, field, err)
	}
	return nil
}

// Int32 returns ErrInvalidInput unless n fits the 32-bit integer column it
// is stored in (check.Int32).
func (r Rules) Int32(field string, n int) error {
	if err := check.Int32(n, math.MinInt32); err != nil {
		return fmt.Errorf("%w: %s %w", r.ErrInvalidInput, field, err)
	}
	return nil
}

// Time returns ErrInvalidInput unless t is within years 1 to 9999.
func (r Rules) Time(field string, t time.Time) error {
	if err := check.Year(t); err != nil {
		return fmt.Errorf("%w: %s: %w", r.ErrInvalidInput, field, err)
	}
	return nil
}
