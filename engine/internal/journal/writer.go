package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/batch"
	"github.com/cairnhq/cairn/store"
)

// ErrWriterStopped answers a save submitted to a Writer after Stop (the
// journal then writes the step alone, see Journal.Save).
var ErrWriterStopped = errors.New("step writer stopped")

// WriterStore is what the step writer writes with.
type WriterStore interface {
	TaskStepSaveMany(ctx context.Context, saves []store.StepSave) ([]*store.Step, error)
	TaskCheckpointMany(ctx context.Context, saves []store.CheckpointSave) ([]bool, error)
}

// WriterConfig builds a Writer.
type WriterConfig struct {
	Store WriterStore
	// Max is the most steps in one statement.
	Max int
	// More reports whether more steps are expected soon when n are
	// gathered (see batch.Config.More): the engine's handlers that hold
	// slots.
	More  func(n int) bool
	Clock func() time.Time
	// Health logs failed writes (once per outage) and paces retries.
	Health *backoff.Health
}

// WriterWriters is how many batches the step writer has in flight at once.
const WriterWriters = 2

// Writer journals the steps of many attempts together, as the completer
// writes finished attempts: a handler submits its step (holder, name,
// result) and waits for its own answer; the writer commits what has
// queued, of many tasks, in one statement (store.TaskStepSaveMany; the
// checkpoints of a batch in another, store.TaskCheckpointMany), then
// answers each. A step is answered only once its commit is durable, and
// nothing of a batch is visible before it; each task's holder check is
// in the same statement, so a stale attempt's step is not written (its
// submitter gets store.ErrNotFound) while the others of its batch are.
// Start runs it; Stop writes what was submitted and stops it.
type Writer struct {
	cfg     WriterConfig
	health  *backoff.Loop
	batcher *batch.Writer[*saveRequest]

	statements atomic.Int64 // statements committed, for tests
}

// saveRequest is one handler's step, or checkpoint (save.Result).
type saveRequest struct {
	save       store.StepSave
	checkpoint bool
	ctx        context.Context
	reply      chan saveAnswer // buffered: the writer never blocks on it
}

type saveAnswer struct {
	step *store.Step
	err  error
}

// NewWriter returns a step writer; Start runs it.
func NewWriter(cfg WriterConfig) *Writer {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Health == nil {
		cfg.Health = backoff.NewHealth(slog.New(slog.DiscardHandler), cfg.Clock)
	}
	w := &Writer{cfg: cfg, health: cfg.Health.Loop("steps")}
	w.batcher = batch.New(batch.Config[*saveRequest]{Max: cfg.Max, Writers: WriterWriters, Write: w.flush,
		More: cfg.More, Clock: cfg.Clock})
	return w
}

// Statements returns how many statements the writer committed, for tests.
func (w *Writer) Statements() int64 { return w.statements.Load() }

// Start runs the writer's batches and returns at once.
func (w *Writer) Start(ctx context.Context) error { return w.batcher.Start(ctx) }

// Stop writes what was submitted and stops the writer; later saves get
// ErrWriterStopped. Safe twice or before Start.
func (w *Writer) Stop() { w.batcher.Stop() }

// Save submits result as the step name of h's task and waits for its
// commit: the stored step (the one journaled under name already, if
// any, wins), an error wrapping store.ErrNotFound when the task is no
// longer h's, ctx's error when ctx ended before the write,
// ErrWriterStopped after Stop. It does not return while its write may
// still commit.
func (w *Writer) Save(ctx context.Context, h store.StepHolder, name string, result json.RawMessage) (*store.Step, error) {
	a := w.submit(ctx, &saveRequest{save: store.StepSave{StepHolder: h, Name: name, Result: result}})
	return a.step, a.err
}

// Checkpoint submits v as the checkpoint of h's task and waits for its
// commit; its errors are Save's.
func (w *Writer) Checkpoint(ctx context.Context, h store.StepHolder, v json.RawMessage) error {
	return w.submit(ctx, &saveRequest{save: store.StepSave{StepHolder: h, Result: v}, checkpoint: true}).err
}

// submit queues r and waits for its answer.
func (w *Writer) submit(ctx context.Context, r *saveRequest) saveAnswer {
	if err := ctx.Err(); err != nil {
		return saveAnswer{err: err}
	}
	r.ctx, r.reply = ctx, make(chan saveAnswer, 1)
	if err := w.batcher.Submit(r); err != nil {
		return saveAnswer{err: ErrWriterStopped}
	}
	return <-r.reply
}

// flush writes a batch: its steps in one statement, its checkpoints in
// another (see write).
func (w *Writer) flush(batch []*saveRequest) {
	var steps, checkpoints []*saveRequest
	for _, r := range batch {
		if r.checkpoint {
			checkpoints = append(checkpoints, r)
		} else {
			steps = append(steps, r)
		}
	}
	if len(steps) > 0 {
		w.write(steps, w.writeSteps)
	}
	if len(checkpoints) > 0 {
		w.write(checkpoints, w.writeCheckpoints)
	}
}

// writeSteps journals a batch of steps in one statement and returns each
// one's answer.
func (w *Writer) writeSteps(ctx context.Context, batch []*saveRequest) ([]saveAnswer, error) {
	saves := make([]store.StepSave, len(batch))
	for i, r := range batch {
		saves[i] = r.save
	}
	steps, err := w.cfg.Store.TaskStepSaveMany(ctx, saves)
	if err != nil {
		return nil, err
	}
	out := make([]saveAnswer, len(batch))
	for i, r := range batch {
		if steps[i] == nil {
			out[i].err = fmt.Errorf("journal step %q of task %d: %w", r.save.Name, r.save.TaskID, store.ErrNotFound)
		} else {
			out[i].step = steps[i]
		}
	}
	return out, nil
}

// writeCheckpoints stores a batch of checkpoints in one statement and
// returns each one's answer.
func (w *Writer) writeCheckpoints(ctx context.Context, batch []*saveRequest) ([]saveAnswer, error) {
	saves := make([]store.CheckpointSave, len(batch))
	for i, r := range batch {
		saves[i] = store.CheckpointSave{StepHolder: r.save.StepHolder, Value: r.save.Result}
	}
	held, err := w.cfg.Store.TaskCheckpointMany(ctx, saves)
	if err != nil {
		return nil, err
	}
	out := make([]saveAnswer, len(batch))
	for i, r := range batch {
		if !held[i] {
			out[i].err = fmt.Errorf("checkpoint task %d: %w", r.save.TaskID, store.ErrNotFound)
		}
	}
	return out, nil
}

// write commits a batch of one kind with do, retrying with backoff while
// the database fails; requests whose handler context ended meanwhile are
// answered and left out. A batch the database refuses for what it writes
// is written again request by request, each answered with its own
// outcome.
func (w *Writer) write(batch []*saveRequest, do func(context.Context, []*saveRequest) ([]saveAnswer, error)) {
	ctx := context.Background()
	var bo *backoff.Backoff // made at the first failure
	for {
		live := batch[:0]
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil {
				r.reply <- saveAnswer{err: err}
				continue
			}
			live = append(live, r)
		}
		batch = live
		if len(batch) == 0 {
			return
		}
		answers, err := do(ctx, batch)
		if err == nil {
			w.health.OK(ctx)
			w.statements.Add(1)
			for i, r := range batch {
				r.reply <- answers[i]
			}
			return
		}
		if store.IsRefused(err) && len(batch) > 1 {
			for _, r := range batch {
				w.write([]*saveRequest{r}, do)
			}
			return
		}
		if store.IsRefused(err) {
			batch[0].reply <- saveAnswer{err: err}
			return
		}
		w.health.Fail(ctx, fmt.Errorf("journal %d steps or checkpoints: %w", len(batch), err))
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		w.cfg.Health.Wait(ctx, nil, bo.Next())
	}
}
