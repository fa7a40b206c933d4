package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// This file is the one definition of what Cairn sends with NOTIFY: the
// Go types of the three channels' messages, their encoding and decoding,
// and the SQL fragments that build the same payloads inside statements.
//
//   - Events channel (EventsChannel): committed transitions,
//     {"e": [[task id, run id, from, to, queue, attempt, worker], ...]};
//     from and worker are null when absent (a created task, a task not
//     held). EventsMessage.
//   - Ready channel (ReadyChannel): the bare name of a queue with new
//     ready work. ReadyMessage.
//   - Control channel (ControlChannel): {"k": kind, "t": [task ids],
//     "a": [attempts], "q": queue} for tasks taken from their holder
//     (each with the attempt taken), signals to deferred tasks, and queue
//     changes. ControlMessage.
//
// Compatibility across versions (engines of two versions share a
// database during a rolling deploy): decoders ignore object keys they do
// not know and elements past the known ones of a transition's array, and
// a control kind they do not know decodes without error (its consumer
// ignores it). So a new field is added as a new object key or appended to
// the transition array, never inserted or reordered.
//
// Size: PostgreSQL refuses a payload of 8000 bytes or more, and the
// refusal fails the whole transaction. A transition takes at most about
// 180 bytes (three 19-digit ids, two states, a 64-byte queue name, an
// attempt), so an events payload carries at most EventsPerPayload of
// them and a control payload at most TaskIDsPerPayload ids (21 bytes
// each, and 12 for an attempt); statements that announce more send
// several payloads.

// MaxPayload is the size PostgreSQL refuses a NOTIFY payload at.
const MaxPayload = 8000

// EventsPerPayload is how many transitions one events payload carries.
const EventsPerPayload = 40

// TaskIDsPerPayload is how many task ids one control payload carries.
const TaskIDsPerPayload = 200

// ErrBadNotification is the error (under a *NotificationError) of a
// payload that is not a message of its channel.
var ErrBadNotification = errors.New("malformed notification")

// NotificationError is a payload that could not be decoded: which
// message, what was wrong, and the start of the payload.
type NotificationError struct {
	Message string // "events", "ready" or "control"
	Reason  string
	Payload string // at most 200 bytes of it
}

func (e *NotificationError) Error() string {
	return fmt.Sprintf("%s notification: %s (payload %q)", e.Message, e.Reason, e.Payload)
}

// Unwrap makes errors.Is(err, ErrBadNotification) hold.
func (e *NotificationError) Unwrap() error { return ErrBadNotification }

func badNotification(message, payload, format string, args ...any) error {
	if len(payload) > 200 {
		payload = payload[:200]
	}
	return &NotificationError{Message: message, Reason: fmt.Sprintf(format, args...), Payload: payload}
}

// TransitionNote is one committed transition as the events channel
// announces it.
type TransitionNote struct {
	TaskID   int64
	RunID    int64
	From     string // "" when the task was created
	To       string
	Queue    string
	Attempt  int
	WorkerID int64 // 0 when no worker held the task
}

// transitionFields is how many elements of a transition's array this
// version reads; later ones are ignored.
const transitionFields = 7

// MarshalJSON writes the transition as the array the SQL side builds.
func (n TransitionNote) MarshalJSON() ([]byte, error) {
	var from, worker any
	if n.From != "" {
		from = n.From
	}
	if n.WorkerID != 0 {
		worker = n.WorkerID
	}
	return json.Marshal([]any{n.TaskID, n.RunID, from, n.To, n.Queue, n.Attempt, worker})
}

// UnmarshalJSON reads the array form, each element by its type; from and
// worker may be null, the others may not.
func (n *TransitionNote) UnmarshalJSON(b []byte) error {
	var r []json.RawMessage
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("transition is not an array: %w", err)
	}
	if len(r) < transitionFields {
		return fmt.Errorf("transition has %d elements, want %d", len(r), transitionFields)
	}
	var from *string
	var worker *int64
	fields := []struct {
		name     string
		dst      any
		nullable bool
	}{
		{"task id", &n.TaskID, false},
		{"run id", &n.RunID, false},
		{"from", &from, true},
		{"to", &n.To, false},
		{"queue", &n.Queue, false},
		{"attempt", &n.Attempt, false},
		{"worker", &worker, true},
	}
	for i, f := range fields {
		if !f.nullable && bytes.Equal(bytes.TrimSpace(r[i]), []byte("null")) {
			return fmt.Errorf("transition %s is null", f.name)
		}
		if err := json.Unmarshal(r[i], f.dst); err != nil {
			return fmt.Errorf("transition %s: %w", f.name, err)
		}
	}
	n.From, n.WorkerID = "", 0
	if from != nil {
		n.From = *from
	}
	if worker != nil {
		n.WorkerID = *worker
	}
	return nil
}

// EventsMessage is one payload of the events channel.
type EventsMessage struct {
	Transitions []TransitionNote
	// Logs names the tasks with new lines in task_logs (key "l", added
	// after "e": older decoders ignore it). A payload carries at most
	// LogNotesPerPayload of them.
	Logs []LogNote
}

// LogNote says that a task has new log lines: [task id, run id].
type LogNote struct {
	TaskID int64
	RunID  int64
}

// LogNotesPerPayload is how many log notes one events payload carries
// (about 42 bytes each).
const LogNotesPerPayload = 150

// MarshalJSON writes the note as [task id, run id].
func (n LogNote) MarshalJSON() ([]byte, error) { return json.Marshal([2]int64{n.TaskID, n.RunID}) }

// UnmarshalJSON reads [task id, run id]; later elements are ignored.
func (n *LogNote) UnmarshalJSON(b []byte) error {
	var r []int64
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("log note is not an array of ids: %w", err)
	}
	if len(r) < 2 {
		return fmt.Errorf("log note has %d elements, want 2", len(r))
	}
	n.TaskID, n.RunID = r[0], r[1]
	return nil
}

type eventsWire struct {
	E []TransitionNote `json:"e"`
	L []LogNote        `json:"l,omitempty"`
}

// Encode returns the payload; it fails when the payload would be too large
// for NOTIFY.
func (m EventsMessage) Encode() (string, error) {
	// "e" is always an array: decoders of older versions require it.
	b, err := json.Marshal(eventsWire{E: nonNilNotes(m.Transitions), L: m.Logs})
	if err != nil {
		return "", fmt.Errorf("encode events notification: %w", err)
	}
	return checkSize("events", b)
}

// DecodeEvents reads a payload of the events channel.
func DecodeEvents(payload string) (EventsMessage, error) {
	var w struct {
		E *[]TransitionNote `json:"e"`
		L []LogNote         `json:"l"`
	}
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		return EventsMessage{}, badNotification("events", payload, "%v", err)
	}
	if w.E == nil {
		return EventsMessage{}, badNotification("events", payload, `no "e" array`)
	}
	return EventsMessage{Transitions: *w.E, Logs: w.L}, nil
}

func nonNilNotes(ts []TransitionNote) []TransitionNote {
	if ts == nil {
		return []TransitionNote{}
	}
	return ts
}

// ReadyMessage is one payload of the ready channel: a queue has new ready
// work.
type ReadyMessage struct {
	Queue string
}

// Encode returns the payload: the queue name itself.
func (m ReadyMessage) Encode() (string, error) {
	return checkSize("ready", []byte(m.Queue))
}

// DecodeReady reads a payload of the ready channel.
func DecodeReady(payload string) (ReadyMessage, error) {
	if payload == "" {
		return ReadyMessage{}, badNotification("ready", payload, "no queue name")
	}
	return ReadyMessage{Queue: payload}, nil
}

// ControlKind says what a control message asks of engines.
type ControlKind string

// Control kinds.
const (
	// ControlTaken: the tasks were taken from the worker holding them
	// (cancelled, rescued): it stops the handlers of the attempts taken.
	// The worker that took a task may claim it again before it hears the
	// message, so the message names the attempt: a later one runs on.
	ControlTaken ControlKind = "taken"
	// ControlSignal: the deferred tasks re-check their condition now.
	ControlSignal ControlKind = "signal"
	// ControlQueue: the queue's pause flag or cap changed.
	ControlQueue ControlKind = "queue"
	// ControlRun: the awaited runs ended (completed, failed, cancelled or
	// interrupted); sent by the database (migration 025).
	ControlRun ControlKind = "run"
)

// ControlMessage is one payload of the control channel. TaskIDs are set
// for ControlTaken and ControlSignal, Attempts for ControlTaken (the
// attempt each task was taken at, in the order of TaskIDs; nil from a
// version before them), Queue for ControlQueue, RunIDs for ControlRun. A
// kind this version does not know decodes as is, for the consumer to
// ignore.
type ControlMessage struct {
	Kind     ControlKind
	TaskIDs  []int64
	Attempts []int
	Queue    string
	RunIDs   []int64
}

type controlWire struct {
	K ControlKind `json:"k"`
	T []int64     `json:"t,omitempty"`
	A []int       `json:"a,omitempty"`
	Q string      `json:"q,omitempty"`
	R []int64     `json:"r,omitempty"`
}

// Encode returns the payload; it fails when the payload would be too large
// for NOTIFY.
func (m ControlMessage) Encode() (string, error) {
	if m.Kind == "" {
		return "", fmt.Errorf("encode control notification: no kind")
	}
	if m.Attempts != nil && len(m.Attempts) != len(m.TaskIDs) {
		return "", fmt.Errorf("encode control notification: %d attempts for %d task ids", len(m.Attempts), len(m.TaskIDs))
	}
	b, err := json.Marshal(controlWire{K: m.Kind, T: m.TaskIDs, A: m.Attempts, Q: m.Queue, R: m.RunIDs})
	if err != nil {
		return "", fmt.Errorf("encode control notification: %w", err)
	}
	return checkSize("control", b)
}

// DecodeControl reads a payload of the control channel.
func DecodeControl(payload string) (ControlMessage, error) {
	var w controlWire
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		return ControlMessage{}, badNotification("control", payload, "%v", err)
	}
	if w.K == "" {
		return ControlMessage{}, badNotification("control", payload, `no kind "k"`)
	}
	if w.A != nil && len(w.A) != len(w.T) {
		return ControlMessage{}, badNotification("control", payload, "%d attempts for %d task ids", len(w.A), len(w.T))
	}
	return ControlMessage{Kind: w.K, TaskIDs: w.T, Attempts: w.A, Queue: w.Q, RunIDs: w.R}, nil
}

func checkSize(message string, b []byte) (string, error) {
	if len(b) >= MaxPayload {
		return "", fmt.Errorf("encode %s notification: %d bytes, NOTIFY takes fewer than %d", message, len(b), MaxPayload)
	}
	return string(b), nil
}

// ControlNotify sends m on the control channel (at commit when the store
// is in a transaction).
func (s *Store) ControlNotify(ctx context.Context, m ControlMessage) error {
	payload, err := m.Encode()
	if err != nil {
		return err
	}
	if _, err := s.exec(ctx, `SELECT pg_notify(?, ?)`, s.ControlChannel(), payload); err != nil {
		return fmt.Errorf("notify %s: %w", m.Kind, err)
	}
	return nil
}

// queueChangedNotify is the statement that tells engines a queue changed:
// a control message and a ready message (its tasks may be claimable now).
// Arguments: control channel, control payload, ready channel, ready payload.
const queueChangedNotify = `SELECT pg_notify(?, ?), pg_notify(?, ?)`

// queueChangedArgs returns the arguments of queueChangedNotify for queue.
func (s *Store) queueChangedArgs(queue string) ([]any, error) {
	ctl, err := ControlMessage{Kind: ControlQueue, Queue: queue}.Encode()
	if err != nil {
		return nil, err
	}
	ready, err := ReadyMessage{Queue: queue}.Encode()
	if err != nil {
		return nil, err
	}
	return []any{s.ControlChannel(), ctl, s.ReadyChannel(), ready}, nil
}

// The SQL side of the same formats, for statements that announce the rows
// they wrote. Each must decode with the Decode functions above (see
// notify_test.go).

// readyNotifyByRun is the statement that announces on the ready channel
// every queue with ready tasks of a run. Arguments: ready channel, run id.
const readyNotifyByRun = `SELECT pg_notify(?, queue) FROM (SELECT DISTINCT queue FROM ?schema.tasks WHERE id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = ?)::bigint[]) AND status = 'ready') q`
