package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// This file holds durable waits: the journal of a task's steps
// (task_steps), the signals sent to tasks (task_signals), and the durable
// wait a deferred task is parked in (TransitionItem's Wait* fields, see
// 011_durable_waits).

// Durable wait kinds (tasks.wait_kind).
const (
	WaitKindSleep  = "sleep"
	WaitKindSignal = "signal"
)

// ErrTaskFinished is returned for a signal sent to a task that finished.
var ErrTaskFinished = errors.New("task finished")

// Step is a row of task_steps: one journaled step of a task.
type Step struct {
	bun.BaseModel `bun:"table:task_steps"`

	TaskID  int64           `bun:"task_id" json:"task_id"`
	Name    string          `bun:"name" json:"name"`
	Result  json.RawMessage `bun:"result,type:jsonb" json:"result"`
	Attempt int             `bun:"attempt" json:"attempt"`
	At      time.Time       `bun:"at" json:"at"`
}

// Signal is a row of task_signals.
type Signal struct {
	bun.BaseModel `bun:"table:task_signals"`

	ID              int64           `bun:"id,pk" json:"id"`
	TaskID          int64           `bun:"task_id" json:"task_id"`
	Name            string          `bun:"name" json:"name"`
	Payload         json.RawMessage `bun:"payload,type:jsonb" json:"payload"`
	SentAt          time.Time       `bun:"sent_at" json:"sent_at"`
	ConsumedAt      *time.Time      `bun:"consumed_at" json:"consumed_at,omitempty"`
	ConsumedAttempt *int            `bun:"consumed_attempt" json:"consumed_attempt,omitempty"`
}

// Wait is the durable wait a task parks in, stored on its row while it is
// deferred (see TransitionItem.SetWait).
type Wait struct {
	Kind  string     // WaitKindSleep or WaitKindSignal
	Name  string     // signal name
	Until *time.Time // wake time of a sleep, deadline of a signal wait; nil: none
	Since time.Time  // when the wait began
}

// SetWait makes a move to deferred store w as the row's durable wait.
func (it *TransitionItem) SetWait(w *Wait) {
	if w == nil {
		return
	}
	it.WaitKind, it.WaitName, it.WaitUntil = w.Kind, w.Name, w.Until
	since := w.Since
	it.WaitSince = &since
}

// SetCondition makes a move to deferred store the interval of the
// DeferUntil condition the task parks in, checked every every since since
// (no durable wait: WaitKind stays empty). An interval under a
// millisecond is stored as 1 ms.
func (it *TransitionItem) SetCondition(every time.Duration, since time.Time) {
	it.WaitEveryMs = max(every.Milliseconds(), 1)
	it.WaitSince = &since
}

// StepHolder names the attempt of a task that journals a step or takes a
// signal: the write happens only while the task is still that attempt's,
// held by that worker (running or deferred).
type StepHolder struct {
	TaskID   int64
	WorkerID int64
	Attempt  int
}

// lockHeld locks (FOR SHARE) the task row of h while it is still h's;
// ErrNotFound when it is not (sql/steps.sql).
func (s *Store) lockHeld(ctx context.Context, h StepHolder) error {
	var ids []int64
	if err := s.scanPrepared(ctx, &ids, s.query("TaskStepLock"), h.TaskID, h.WorkerID, h.Attempt); err != nil {
		return err
	}
	if len(ids) == 0 {
		return ErrNotFound
	}
	return nil
}

// TaskStepList returns the steps journaled for a task, in journal order.
func (s *Store) TaskStepList(ctx context.Context, taskID int64) ([]Step, error) {
	var out []Step
	if err := s.raw(`SELECT task_id, name, result, attempt, at FROM ?schema.task_steps WHERE task_id = ? ORDER BY at, name`,
		taskID).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list steps of task %d: %w", taskID, err)
	}
	return out, nil
}

// TaskStepSave journals result as the step name of the holder's task and
// returns the stored step: the one already journaled under that name, if
// any (its result wins). It writes nothing and returns ErrNotFound when
// the task is no longer the holder's (cancelled, rescued, another
// attempt).
func (s *Store) TaskStepSave(ctx context.Context, h StepHolder, name string, result json.RawMessage) (*Step, error) {
	var out Step
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.lockHeld(ctx, h); err != nil {
			return err
		}
		return tx.stepSave(ctx, h, name, result, &out)
	})
	if err != nil {
		return nil, fmt.Errorf("journal step %q of task %d: %w", name, h.TaskID, err)
	}
	return &out, nil
}

// StepSave is one step to journal with TaskStepSaveMany: result under
// name, for the holder's task.
type StepSave struct {
	StepHolder
	Name   string
	Result json.RawMessage
}

// stepSaveArg is a StepSave as TaskStepSaveMany's JSON argument reads it.
type stepSaveArg struct {
	I      int             `json:"i"`
	Task   int64           `json:"t"`
	Worker int64           `json:"w"`
	Att    int             `json:"a"`
	Name   string          `json:"n"`
	Result json.RawMessage `json:"v"`
}

// stepSaved is a row of TaskStepSaveMany: a save's task held or not, and
// the step stored under its name (none: see the statement).
type stepSaved struct {
	I       int             `bun:"i"`
	Held    bool            `bun:"held"`
	Result  json.RawMessage `bun:"result"`
	Attempt *int            `bun:"attempt"`
	At      *time.Time      `bun:"at"`
}

// TaskStepSaveMany journals many steps, of many tasks, in one statement
// and commit (sql/steps.sql): each as TaskStepSave would, its task row
// locked while still its holder's in the same statement. It returns, for
// each save in order, the stored step (the one already journaled under
// its name, if any, wins), or nil when the save's task is no longer its
// holder's: nothing of that save is written.
func (s *Store) TaskStepSaveMany(ctx context.Context, saves []StepSave) ([]*Step, error) {
	args := make([]stepSaveArg, len(saves))
	for i, v := range saves {
		args[i] = stepSaveArg{I: i, Task: v.TaskID, Worker: v.WorkerID, Att: v.Attempt, Name: v.Name, Result: v.Result}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("journal %d steps: %w", len(saves), err)
	}
	var rows []stepSaved
	if err := s.scanPrepared(ctx, &rows, s.query("TaskStepSaveMany"), jsonArg(b)); err != nil {
		return nil, fmt.Errorf("journal %d steps: %w", len(saves), err)
	}
	if len(rows) != len(saves) {
		return nil, fmt.Errorf("journal %d steps: %d rows back", len(saves), len(rows))
	}
	out := make([]*Step, len(saves))
	for _, r := range rows {
		if r.I < 0 || r.I >= len(saves) || !r.Held {
			continue
		}
		v := saves[r.I]
		if r.Attempt == nil || r.At == nil {
			// Journaled under its name by a write that committed after
			// this statement began: read it now.
			var got []Step
			if err := s.scanPrepared(ctx, &got, s.query("TaskStepGet"), v.TaskID, v.Name); err != nil {
				return nil, fmt.Errorf("journal step %q of task %d: %w", v.Name, v.TaskID, err)
			}
			if len(got) == 0 {
				return nil, fmt.Errorf("journal step %q of task %d: %w", v.Name, v.TaskID, ErrNotFound)
			}
			out[r.I] = &got[0]
			continue
		}
		out[r.I] = &Step{TaskID: v.TaskID, Name: v.Name, Result: r.Result, Attempt: *r.Attempt, At: *r.At}
	}
	return out, nil
}

// stepSave inserts a step unless one of that name is journaled, and reads
// back the stored one. The task row is locked.
func (s *Store) stepSave(ctx context.Context, h StepHolder, name string, result json.RawMessage, out *Step) error {
	var rows []Step
	if err := s.scanPrepared(ctx, &rows, s.query("TaskStepInsert"), h.TaskID, name, jsonArg(result), h.Attempt); err != nil {
		return err
	}
	if len(rows) == 0 {
		if err := s.scanPrepared(ctx, &rows, s.query("TaskStepGet"), h.TaskID, name); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("step %q of task %d: %w", name, h.TaskID, ErrNotFound)
	}
	*out = rows[0]
	return nil
}

// SignalResult is the journaled result of a signal wait (the step of
// TaskSignalTake): the signal taken, or a timeout.
type SignalResult struct {
	Signal  int64           `json:"signal,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Timeout bool            `json:"timeout,omitempty"`
}

// SignalTakeParams asks to take the oldest pending signal of a name.
type SignalTakeParams struct {
	StepHolder
	// Name is the signal's name.
	Name string
	// Step is the name the result is journaled under.
	Step string
	// Timeout, when no signal is pending, journals a timeout instead
	// (SignalResult.Timeout).
	Timeout bool
}

// TaskSignalTake takes the oldest pending signal named p.Name of the
// holder's task and journals it as step p.Step, in one transaction: a
// signal is taken once, and a later attempt reads it back from the
// journal. With none pending it journals a timeout when p.Timeout says
// so, else it returns nil and writes nothing. A step already journaled as
// p.Step is returned as it is. ErrNotFound: the task is no longer the
// holder's.
func (s *Store) TaskSignalTake(ctx context.Context, p SignalTakeParams) (*Step, error) {
	var out *Step
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.lockHeld(ctx, p.StepHolder); err != nil {
			return err
		}
		var done []Step
		if err := tx.raw(`SELECT task_id, name, result, attempt, at FROM ?schema.task_steps WHERE task_id = ? AND name = ?`,
			p.TaskID, p.Step).Scan(ctx, &done); err != nil {
			return err
		}
		if len(done) == 1 {
			out = &done[0]
			return nil
		}
		var taken []Signal
		if err := tx.raw(`UPDATE ?schema.task_signals SET consumed_at = now(), consumed_attempt = ?
			WHERE id = (SELECT id FROM ?schema.task_signals WHERE task_id = ? AND name = ? AND consumed_at IS NULL
				ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING id, task_id, name, payload, sent_at`, p.Attempt, p.TaskID, p.Name).Scan(ctx, &taken); err != nil {
			return err
		}
		var res SignalResult
		switch {
		case len(taken) == 1:
			res = SignalResult{Signal: taken[0].ID, Payload: taken[0].Payload}
		case p.Timeout:
			res = SignalResult{Timeout: true}
		default:
			return nil
		}
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		out = &Step{}
		return tx.stepSave(ctx, p.StepHolder, p.Step, b, out)
	})
	if err != nil {
		return nil, fmt.Errorf("take signal %q of task %d: %w", p.Name, p.TaskID, err)
	}
	return out, nil
}

// SignalSend stores a signal for a task that has not finished and wakes
// it (a control NOTIFY at commit, as Signal): the function signal_insert
// (migration 035), which the SQL API's send_signal calls too.
// ErrNotFound: no such task; ErrTaskFinished: the task is completed,
// failed, skipped or cancelled.
func (s *Store) SignalSend(ctx context.Context, taskID int64, name string, payload json.RawMessage) (*Signal, error) {
	var out []Signal
	err := s.scanPrepared(ctx, &out, s.query("SignalSend"), taskID, name, jsonArg(payload))
	if err == nil && len(out) != 1 {
		err = fmt.Errorf("%d rows", len(out))
	}
	if err != nil {
		return nil, fmt.Errorf("send signal %q to task %d: %w", name, taskID, raised(err))
	}
	return &out[0], nil
}

// SignalListByTask returns the signals sent to a task, oldest first.
func (s *Store) SignalListByTask(ctx context.Context, taskID int64) ([]Signal, error) {
	var out []Signal
	if err := s.raw(`SELECT * FROM ?schema.task_signals WHERE task_id = ? ORDER BY id`, taskID).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list signals of task %d: %w", taskID, err)
	}
	return out, nil
}

// CheckpointSave is one checkpoint to store with TaskCheckpointMany.
type CheckpointSave struct {
	StepHolder
	Value json.RawMessage
}

// checkpointSaveArg is a CheckpointSave as TaskCheckpointMany's JSON
// argument reads it.
type checkpointSaveArg struct {
	I      int             `json:"i"`
	Task   int64           `json:"t"`
	Worker int64           `json:"w"`
	Att    int             `json:"a"`
	Value  json.RawMessage `json:"v"`
}

// checkpointSaved is a row of TaskCheckpointMany.
type checkpointSaved struct {
	I       int   `bun:"i"`
	Held    bool  `bun:"held"`
	Updated int64 `bun:"updated"`
}

// TaskCheckpointMany stores many tasks' checkpoints in one statement and
// commit (sql/steps.sql), each as TaskCheckpoint would (of several for
// one task, the last wins). It returns for each save, in order, whether
// its task was still its holder's: nothing of the others is written.
func (s *Store) TaskCheckpointMany(ctx context.Context, saves []CheckpointSave) ([]bool, error) {
	args := make([]checkpointSaveArg, len(saves))
	for i, v := range saves {
		args[i] = checkpointSaveArg{I: i, Task: v.TaskID, Worker: v.WorkerID, Att: v.Attempt, Value: v.Value}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d tasks: %w", len(saves), err)
	}
	var rows []checkpointSaved
	if err := s.scanPrepared(ctx, &rows, s.query("TaskCheckpointMany"), jsonArg(b)); err != nil {
		return nil, fmt.Errorf("checkpoint %d tasks: %w", len(saves), err)
	}
	if len(rows) != len(saves) {
		return nil, fmt.Errorf("checkpoint %d tasks: %d rows back", len(saves), len(rows))
	}
	out := make([]bool, len(saves))
	for _, r := range rows {
		if r.I >= 0 && r.I < len(saves) {
			out[r.I] = r.Held
		}
	}
	return out, nil
}

// TaskCheckpoint stores v as the checkpoint of the holder's task. It
// writes nothing and returns ErrNotFound when the task is no longer the
// holder's attempt (cancelled, rescued, claimed again).
func (s *Store) TaskCheckpoint(ctx context.Context, h StepHolder, v json.RawMessage) error {
	var ids []int64
	if err := s.scanPrepared(ctx, &ids, s.query("TaskCheckpoint"), jsonArg(v), h.TaskID, h.WorkerID, h.Attempt); err != nil {
		return fmt.Errorf("checkpoint task %d: %w", h.TaskID, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("checkpoint task %d: %w", h.TaskID, ErrNotFound)
	}
	return nil
}
