// Package journal is a task attempt's durable journal: the steps its
// handler journaled (Step), and the engine's own entries for its durable
// waits (wake times, deadlines, signals taken, awaited runs) and spawns.
// Each is written in a transaction that checks that the task is still the
// attempt's (the step holder), so a later attempt of the task (after a
// crash, a shutdown or a retry) gets them back instead of running them
// again, and waits only for what is left. It knows nothing of the public
// handle: the engine gives it its store, its error values, its clock and
// the function that parks the task.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

const (
	// ReservedPrefix starts the names of the engine's own journal
	// entries (waits, spawns); Step refuses it.
	ReservedPrefix = "cairn:"
	// SpawnPrefix starts the journal entries of spawns: a spawn's name
	// cannot clash with a Step's, which may not use the engine's prefix.
	SpawnPrefix = ReservedPrefix + "spawn/"
	// MaxNameBytes bounds step, signal and spawn names.
	MaxNameBytes = 200
)

// Store is what a journal runs on the database.
type Store interface {
	TaskStepList(ctx context.Context, taskID int64) ([]store.Step, error)
	TaskStepSave(ctx context.Context, h store.StepHolder, name string, result json.RawMessage) (*store.Step, error)
	TaskCheckpoint(ctx context.Context, h store.StepHolder, v json.RawMessage) error
	TaskSignalTake(ctx context.Context, p store.SignalTakeParams) (*store.Step, error)
	RunSpawn(ctx context.Context, p store.RunSpawnParams) ([]store.SpawnResult, error)
	RunStatusList(ctx context.Context, ids []int64) ([]store.RunOutcome, error)
	RunOutputList(ctx context.Context, runs []store.RunOutcome) error
}

// Errors are the engine's error values the journal's errors wrap, so that
// callers match them with errors.Is.
type Errors struct {
	InvalidInput, NotFound, TaskLost, WaitTimeout error
}

// CheckLabel validates a step, signal or spawn name: 1 to MaxNameBytes
// bytes of text.
func (e Errors) CheckLabel(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s is empty", e.InvalidInput, what)
	}
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %s is %d bytes long, limit %d", e.InvalidInput, what, len(name), MaxNameBytes)
	}
	if err := check.Text(name); err != nil {
		return fmt.Errorf("%w: %s %w", e.InvalidInput, what, err)
	}
	return nil
}

// mapErr names what failed, and maps the store's not found and invalid
// value to the engine's errors.
func (e Errors) mapErr(what string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s: %w", what, e.NotFound)
	}
	if errors.Is(err, store.ErrInvalidValue) {
		return fmt.Errorf("%s: %w: %w", what, e.InvalidInput, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Config is what a journal is given.
type Config struct {
	Errors
	Store Store
	// Holder names the attempt for the journal's compare-and-set.
	Holder store.StepHolder
	// Writer, when set, journals the steps (Save) together with other
	// attempts' (see Writer); else, or once it stopped, each is written
	// alone.
	Writer *Writer
	Clock  func() time.Time
	Log    *slog.Logger
	// PollInterval spaces the looks of signal and run waits that no
	// notification wakes (signalRecheckPolls of it).
	PollInterval time.Duration
}

// Journal is one attempt's view of its task's journal. Its methods are
// safe for concurrent use.
type Journal struct {
	cfg   Config
	mu    sync.Mutex
	steps map[string]store.Step // the task's journal, loaded at first use
	waits map[string]int        // durable waits begun by this attempt, per kind
}

// New returns the journal of the attempt cfg.Holder names.
func New(cfg Config) *Journal { return &Journal{cfg: cfg} }

// Step runs fn once for the task and journals its result (as JSON) under
// name; a later attempt gets the journaled result back without calling
// fn (see the engine's Step).
func Step[T any](ctx context.Context, j *Journal, name string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := j.cfg.CheckLabel("step name", name); err != nil {
		return zero, err
	}
	if strings.HasPrefix(name, ReservedPrefix) {
		return zero, fmt.Errorf("%w: step name %q: the prefix %q is reserved for the engine's waits", j.cfg.InvalidInput, name, ReservedPrefix)
	}
	if st, ok, err := j.Journaled(ctx, name); err != nil {
		return zero, err
	} else if ok {
		var v T
		if err := json.Unmarshal(st.Result, &v); err != nil {
			return zero, fmt.Errorf("step %q: decode journaled result: %w", name, err)
		}
		return v, nil
	}
	v, err := fn(ctx)
	if err != nil {
		return zero, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("step %q: encode result: %w", name, err)
	}
	if err := store.CheckJSON(b); err != nil {
		return zero, fmt.Errorf("step %q: encode result: %w: result %w", name, j.cfg.InvalidInput, err)
	}
	st, err := j.Save(ctx, name, b)
	if err != nil {
		return zero, err
	}
	if st.Attempt != j.cfg.Holder.Attempt {
		// Journaled meanwhile by another attempt (a race with its end):
		// the journal wins.
		var stored T
		if err := json.Unmarshal(st.Result, &stored); err != nil {
			return zero, fmt.Errorf("step %q: decode journaled result: %w", name, err)
		}
		return stored, nil
	}
	return v, nil
}

// Journaled returns the step journaled under name, loading the task's
// journal (one query) at first use. A first attempt has none: no earlier
// attempt could journal one, so nothing is read.
func (j *Journal) Journaled(ctx context.Context, name string) (store.Step, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.steps == nil {
		steps := map[string]store.Step{}
		if j.cfg.Holder.Attempt > 1 {
			list, err := j.cfg.Store.TaskStepList(ctx, j.cfg.Holder.TaskID)
			if err != nil {
				return store.Step{}, false, fmt.Errorf("load journaled steps: %w", err)
			}
			for _, s := range list {
				steps[s.Name] = s
			}
		}
		j.steps = steps
	}
	st, ok := j.steps[name]
	return st, ok, nil
}

// remember adds a step just journaled to the loaded journal.
func (j *Journal) remember(st store.Step) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.steps == nil {
		j.steps = map[string]store.Step{}
	}
	j.steps[st.Name] = st
}

// Save stores result under name (or returns the step journaled under it
// already). A task no longer the attempt's gets Errors.TaskLost.
func (j *Journal) Save(ctx context.Context, name string, result json.RawMessage) (store.Step, error) {
	var st *store.Step
	err := ErrWriterStopped
	if j.cfg.Writer != nil {
		st, err = j.cfg.Writer.Save(ctx, j.cfg.Holder, name, result)
	}
	if errors.Is(err, ErrWriterStopped) {
		st, err = j.cfg.Store.TaskStepSave(ctx, j.cfg.Holder, name, result)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Step{}, fmt.Errorf("journal step %q: %w", name, j.cfg.TaskLost)
		}
		// The heartbeat may find the task lost first and cancel the
		// handler mid-write: the same loss, found another way.
		if cause := context.Cause(ctx); errors.Is(cause, j.cfg.TaskLost) {
			return store.Step{}, fmt.Errorf("journal step %q: %w", name, cause)
		}
		return store.Step{}, err
	}
	j.remember(*st)
	return *st, nil
}

// Checkpoint stores v (as JSON) as the checkpoint of the attempt's task
// (through Config.Writer when set, as Save) and returns it encoded. A
// task no longer the attempt's gets Errors.TaskLost.
func (j *Journal) Checkpoint(ctx context.Context, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := store.CheckJSON(b); err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w: checkpoint %w", j.cfg.InvalidInput, err)
	}
	err = ErrWriterStopped
	if j.cfg.Writer != nil {
		err = j.cfg.Writer.Checkpoint(ctx, j.cfg.Holder, b)
	}
	if errors.Is(err, ErrWriterStopped) {
		err = j.cfg.Store.TaskCheckpoint(ctx, j.cfg.Holder, b)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("checkpoint: %w", j.cfg.TaskLost)
		}
		return nil, err
	}
	return b, nil
}

// once returns the step journaled under name, journaling value()'s
// result first when there is none.
func (j *Journal) once(ctx context.Context, name string, value func() any) (store.Step, error) {
	if st, ok, err := j.Journaled(ctx, name); err != nil || ok {
		return st, err
	}
	b, err := json.Marshal(value())
	if err != nil {
		return store.Step{}, fmt.Errorf("encode %s: %w", name, err)
	}
	return j.Save(ctx, name, b)
}

// nextWait numbers the durable waits of one kind in the order this
// attempt begins them: a replay finds the journal of each by its number.
func (j *Journal) nextWait(kind string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.waits == nil {
		j.waits = map[string]int{}
	}
	j.waits[kind]++
	return fmt.Sprintf("%s%s#%d", ReservedPrefix, kind, j.waits[kind])
}

// SpawnStep validates the name of spawn i of n (seen holds the names of
// those before it, and gets this one) and returns where the spawn is, for
// errors, and the name of its journal entry.
func (e Errors) SpawnStep(i, n int, name string, seen map[string]bool) (where, step string, err error) {
	where = fmt.Sprintf("spawn %q", name)
	if n > 1 {
		where = fmt.Sprintf("spawn %d (%q)", i, name)
	}
	if err := e.CheckLabel("spawn name", name); err != nil {
		return where, "", fmt.Errorf("%s: %w", where, err)
	}
	if seen[name] {
		return where, "", fmt.Errorf("%s: %w: spawn name %q given twice", where, e.InvalidInput, name)
	}
	seen[name] = true
	return where, SpawnPrefix + name, nil
}

// Spawn inserts the runs whose steps are not journaled yet as children of
// the attempt's task and journals them, in one transaction; a spawn
// journaled already returns its run (Existing set).
func (j *Journal) Spawn(ctx context.Context, steps []string, runs []store.RunInsertParams) ([]store.SpawnResult, error) {
	res, err := j.cfg.Store.RunSpawn(ctx, store.RunSpawnParams{StepHolder: j.cfg.Holder, Steps: steps, Runs: runs})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("spawn runs: %w", j.cfg.TaskLost)
	case errors.Is(err, store.ErrInvalidValue):
		return nil, fmt.Errorf("spawn runs: %w: %w", j.cfg.InvalidInput, err)
	case err != nil:
		return nil, fmt.Errorf("spawn runs: %w", err)
	}
	return res, nil
}
