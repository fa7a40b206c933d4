package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/engine/internal/logcapture"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/rule"
)

// TaskHandle is a handler's view of its task: input, output, attempt,
// logging, checkpoints and deferral.
type TaskHandle struct {
	ex     *execution
	ctx    context.Context
	output json.RawMessage

	loggerOnce sync.Once // the logger is made on first use: most handlers never log
	logger     *slog.Logger
	logs       logcapture.Log // the lines the attempt's event keeps

	mergedOnce sync.Once
	merged     json.RawMessage
	mergedErr  error

	journal atomic.Pointer[journal.Journal] // the task's journal, made at first use (see steps)
}

// logLine is a captured log line (see tasklogs.go).
type logLine = logcapture.Line

func newHandle(ex *execution, ctx context.Context) *TaskHandle {
	return &TaskHandle{ex: ex, ctx: ctx}
}

// TaskID returns the task's id.
func (h *TaskHandle) TaskID() int64 { return h.ex.Task.ID }

// RunID returns the run's id.
func (h *TaskHandle) RunID() int64 { return h.ex.Task.RunID }

// Name returns the task's name.
func (h *TaskHandle) Name() string { return h.ex.Task.Name }

// Workflow returns the workflow's name.
func (h *TaskHandle) Workflow() string { return h.ex.Task.Workflow }

// Attempt returns the attempt number, 1 for the first.
func (h *TaskHandle) Attempt() int { return h.ex.Task.Attempt }

// FencingToken names this attempt of this task, "<task id>:<attempt>",
// for calls to other systems: as an idempotency key it makes the retries
// of one attempt's call count once, and since a task's attempts only
// grow, a system that keeps the highest attempt it saw per task can
// refuse the late writes of an attempt that lost the task (its worker
// cut off past its lease). Cairn fences its own writes the same way.
func (h *TaskHandle) FencingToken() string {
	return strconv.FormatInt(h.ex.Task.ID, 10) + ":" + strconv.Itoa(h.ex.Task.Attempt)
}

// Input decodes the task's context into v: the run input merged with the
// outputs of its dependencies (later dependency in declaration order wins
// on key clashes).
func (h *TaskHandle) Input(v any) error {
	h.mergedOnce.Do(func() {
		var pairs [][2]json.RawMessage
		if len(h.ex.Task.DepOutputs) > 0 {
			if err := json.Unmarshal(h.ex.Task.DepOutputs, &pairs); err != nil {
				h.mergedErr = err
				return
			}
		}
		byIdx := map[int]json.RawMessage{}
		for _, p := range pairs {
			var idx int
			_ = json.Unmarshal(p[0], &idx)
			byIdx[idx] = p[1]
		}
		outputs := make([]json.RawMessage, 0, len(h.ex.Task.Deps))
		for _, idx := range h.ex.Task.Deps {
			outputs = append(outputs, byIdx[idx])
		}
		h.merged, h.mergedErr = rule.Merge(h.ex.Task.RunInput, outputs...)
	})
	if h.mergedErr != nil {
		return fmt.Errorf("task context: %w", h.mergedErr)
	}
	if err := json.Unmarshal(h.merged, v); err != nil {
		return fmt.Errorf("decode task input: %w", err)
	}
	return nil
}

// RunInput decodes only the run's input into v.
func (h *TaskHandle) RunInput(v any) error {
	if err := json.Unmarshal(h.ex.Task.RunInput, v); err != nil {
		return fmt.Errorf("decode run input: %w", err)
	}
	return nil
}

// SetOutput stores v (marshalled to JSON) as the task's output when the
// handler returns nil.
func (h *TaskHandle) SetOutput(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode task output: %w", err)
	}
	if err := store.CheckJSON(b); err != nil {
		return fmt.Errorf("encode task output: %w: output %w", ErrInvalidInput, err)
	}
	h.output = b
	return nil
}

// Logger returns a logger whose records go to the engine's logger and are
// stored with the attempt (shown on the task page).
func (h *TaskHandle) Logger() *slog.Logger {
	h.loggerOnce.Do(func() {
		ex := h.ex
		base := ex.e.cfg.Logger.With(slog.Int64("task", ex.Task.ID), slog.Int64("run", ex.Task.RunID),
			slog.String("workflow", ex.Task.Workflow), slog.String("task_name", ex.Task.Name), slog.Int("attempt", ex.Task.Attempt))
		h.logger = slog.New(h.logs.Handler(base.Handler(), func(l logLine) {
			if w := ex.e.taskLogs; w != nil {
				w.Add(liveLine(ex, l)) // shown live on the task page (see tasklogs.go)
			}
		}))
	})
	return h.logger
}

// Checkpoint persists v so that a later attempt of this task can read it
// back with LoadCheckpoint.
func (h *TaskHandle) Checkpoint(v any) error {
	b, err := h.steps().Checkpoint(h.ctx, v)
	if err == nil {
		h.ex.Task.Checkpoint = b
	}
	return err
}

// LoadCheckpoint decodes the task's last checkpoint into v and reports
// whether there was one.
func (h *TaskHandle) LoadCheckpoint(v any) (bool, error) {
	cp := h.ex.Task.Checkpoint
	if len(cp) == 0 || string(cp) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(cp, v); err != nil {
		return false, fmt.Errorf("decode checkpoint: %w", err)
	}
	return true, nil
}

// DeferUntil parks the task until cond holds, without holding a slot: the
// row goes running -> deferred and the slot is released; cond is checked
// every interval (and at once on Engine.Signal); when it holds, a slot is
// re-acquired (FIFO with new work) and the row goes deferred -> running.
// The handler's goroutine and locals stay as they are. It returns ctx's
// error if the task is cancelled or the engine shuts down meanwhile.
func (h *TaskHandle) DeferUntil(ctx context.Context, cond func(context.Context) bool, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("defer until: interval must be positive, got %s", every)
	}
	check := func(ctx context.Context) bool {
		h.ex.checked()
		return cond(ctx)
	}
	if check(ctx) {
		return nil
	}
	return h.park(ctx, nil, every, func(ctx context.Context) (bool, time.Duration, error) { return check(ctx), every, nil })
}

// park is DeferUntil's wait: the row goes running -> deferred (storing
// wait, the durable wait it parks in, when not nil) and the slot is
// released; check runs after every (its last answer's interval after
// that) and at every signal, until it reports done or fails; then the
// slot is re-acquired and the row goes deferred -> running (see
// parker.Parker).
func (h *TaskHandle) park(ctx context.Context, wait *store.Wait, every time.Duration,
	check func(context.Context) (done bool, next time.Duration, err error)) error {
	ex, e := h.ex, h.ex.e
	// The attempt's timeout stops now, before the park write: that write
	// is batched with other tasks' and may wait behind them (or on a busy
	// database), which is the engine's time, not the handler's. Counting
	// it, a task could time out while its row was being parked, and fail
	// right after the row went deferred.
	if ex.Deadline != nil {
		ex.Deadline.Pause()
		defer ex.Deadline.Resume()
	}
	if err := e.parker.Park(ctx, ex, wait, every); err != nil {
		return err
	}
	if wait != nil {
		// No handler code runs until the wait ends: an interrupt sends
		// the task back to ready (see interruptItem), and a shutdown
		// does not wait for it (see Shutdown).
		ex.InWait.Store(true)
		if e.life.Stopping() {
			ex.Cancel(errShutdownCancel)
		}
	}
	if err := e.parker.Wait(ctx, ex, every, check); err != nil {
		return err
	}
	if err := e.parker.Resume(ctx, ex); err != nil {
		return err
	}
	ex.InWait.Store(false)
	return nil
}

// detail is what the attempt's event stores: the log and a panic stack.
func (h *TaskHandle) detail(stack []byte) json.RawMessage { return h.logs.Detail(stack) }

// holder names this attempt for the journal's compare-and-set.
func (h *TaskHandle) holder() store.StepHolder {
	return store.StepHolder{TaskID: h.ex.Task.ID, WorkerID: h.ex.e.workerID.Load(), Attempt: h.ex.Task.Attempt}
}

// journalErrs are the errors the journal's wrap.
var journalErrs = journal.Errors{InvalidInput: ErrInvalidInput, NotFound: ErrNotFound, TaskLost: ErrTaskLost, WaitTimeout: ErrWaitTimeout}

// steps returns the attempt's journal (package journal), made at first
// use: most handlers never journal.
func (h *TaskHandle) steps() *journal.Journal {
	if j := h.journal.Load(); j != nil {
		return j
	}
	e := h.ex.e
	h.journal.CompareAndSwap(nil, journal.New(journal.Config{Errors: journalErrs, Store: e.st, Holder: h.holder(), Writer: e.steps,
		Clock: e.cfg.Clock, Log: e.cfg.Logger, PollInterval: e.cfg.PollInterval}))
	return h.journal.Load()
}
