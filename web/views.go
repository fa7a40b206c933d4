package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/rule"
	"github.com/cairnhq/cairn/templates"
)

// This file turns store rows into the view models of package templates.

const (
	// maxShownJSON caps a JSON document shown on a page.
	maxShownJSON = 64 << 10
	// previewJSON caps a JSON document shown in a table cell.
	previewJSON = 120
)

// taskStates lists the task states in the order the overview shows them.
var taskStates = []string{
	store.StatusNotStarted, store.StatusReady, store.StatusRunning, store.StatusDeferred,
	store.StatusCompleted, store.StatusFailed, store.StatusSkipped, store.StatusInterrupted, store.StatusCancelled,
}

// runStatuses lists the run statuses the runs filter offers.
var runStatuses = []string{
	store.RunPending, store.RunRunning, store.RunPaused, store.RunInterrupted,
	store.RunCompleted, store.RunFailed, store.RunCancelled,
}

// liveRunStatuses are the statuses of runs that can still be cancelled:
// those of runs not finished.
var liveRunStatuses = slices.DeleteFunc(slices.Clone(runStatuses), store.RunIsFinished)

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return fmtTime(*t)
}

// fmtAge renders an age in seconds the way fmtRelative does: "3 s ago".
func fmtAge(sec float64) string {
	return fmtRelative(-time.Duration(sec * float64(time.Second)))
}

// prettyJSON indents a JSON document for a <pre>, cut at maxShownJSON.
// Empty and null documents render as "".
func prettyJSON(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	if buf.Len() > maxShownJSON {
		n := buf.Len() - maxShownJSON
		buf.Truncate(maxShownJSON)
		fmt.Fprintf(&buf, "\n… %d more bytes (see the JSON API)", n)
	}
	return buf.String()
}

// shortJSON renders a JSON document on one line, cut at n characters.
func shortJSON(raw json.RawMessage, n int) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return clip(string(raw), n)
	}
	return clip(buf.String(), n)
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func workerRow(w store.WorkerSlots) templates.WorkerRow {
	names := slices.Sorted(maps.Keys(w.Queues))
	qs := make([]string, len(names))
	for i, n := range names {
		qs[i] = n + " (" + strconv.Itoa(w.Queues[n]) + ")"
	}
	row := templates.WorkerRow{
		ID: w.WorkerID, Name: w.Name, Status: w.Status, Live: w.Status == "running",
		Slots: w.Slots, Running: w.Running, Deferred: w.Deferred, Queues: strings.Join(qs, ", "),
		Heartbeat: fmtAge(w.HeartbeatAge), Started: fmtTime(w.StartedAt),
	}
	if w.StoppedAt != nil {
		row.Stopped = fmtTime(*w.StoppedAt)
	}
	return row
}

func queueRow(q store.QueueDepth, now time.Time) templates.QueueRow {
	row := templates.QueueRow{
		Name: q.Queue, Paused: q.Paused, Ready: q.Ready, Available: q.Available,
		Running: q.Running, Deferred: q.Deferred, Slots: q.Slots, Workers: q.Workers,
	}
	if q.MaxRunning != nil {
		row.Cap = strconv.Itoa(*q.MaxRunning)
	}
	if q.OldestReadyAt != nil {
		row.OldestReady = fmtTime(*q.OldestReadyAt)
		if age := now.Sub(*q.OldestReadyAt); age > 0 {
			row.OldestReady += " (" + fmtAge(age.Seconds()) + ")"
		}
	}
	return row
}

// unroutableByQueue groups the ready tasks no live worker can run by queue.
func unroutableByQueue(un []store.Unroutable) map[string][]store.Unroutable {
	out := map[string][]store.Unroutable{}
	for _, u := range un {
		out[u.Queue] = append(out[u.Queue], u)
	}
	return out
}

func runRow(r store.RunListItem) templates.RunRow {
	row := templates.RunRow{
		ID: r.ID, Workflow: r.Workflow, Status: r.Status, Created: stamp(r.CreatedAt),
		Key: deref(r.IdempotencyKey), Input: shortJSON(r.Input, previewJSON),
		Total: r.TaskCount, Done: r.TasksDone, Failed: r.TasksFailed, Active: r.TasksActive, Parked: r.TasksParked,
	}
	if r.Duration != nil {
		row.Duration = fmtDuration(time.Duration(*r.Duration * float64(time.Second)))
	}
	return row
}

func runInfo(r *store.Run) templates.RunInfo {
	live := !store.RunIsFinished(r.Status)
	info := templates.RunInfo{
		ID: r.ID, Workflow: r.Workflow, Status: r.Status, Paused: r.Paused, Queue: r.Queue, Priority: r.Priority,
		Key: deref(r.IdempotencyKey), Created: stamp(r.CreatedAt), Started: stampPtr(r.StartedAt),
		Finished: stampPtr(r.FinishedAt), TaskCount: r.TaskCount,
		CanCancel: live, CanPause: live && !r.Paused, CanResume: r.Paused,
		CanRetry: r.FailedTasks > 0 || r.CancelledTasks > 0, RerunFrom: deref(r.RerunFrom),
	}
	if r.RerunOf != nil {
		info.RerunOf = *r.RerunOf
	}
	if r.DebounceKey != nil && r.Status == store.RunPending && r.StartedAt == nil {
		info.DebounceKey, info.DebounceAt, info.DebounceUntil = *r.DebounceKey, stampPtr(r.DebounceAt), stampPtr(r.DebounceUntil)
	}
	return info
}

func taskRow(t store.Task) templates.TaskRow {
	return templates.TaskRow{
		ID: t.ID, Name: t.Name, Status: t.Status, Queue: t.Queue, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		Output: shortJSON(t.Output, previewJSON), LastError: clip(currentError(&t), 200), Updated: stamp(t.UpdatedAt),
	}
}

// currentError is the task's last error while it still concerns it: not
// once the task has completed (or was skipped), when it belongs to a past
// attempt and shows only in the attempts list.
func currentError(t *store.Task) string {
	if t.Status == store.StatusCompleted || t.Status == store.StatusSkipped {
		return ""
	}
	return deref(t.LastError)
}

func taskInfo(t *store.Task) templates.TaskInfo {
	info := templates.TaskInfo{
		ID: t.ID, RunID: t.RunID, Workflow: t.Workflow, Name: t.Name, Status: t.Status, Queue: t.Queue,
		Priority: t.Priority, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Rescues: t.Rescues, MaxRescues: t.MaxRescues,
		AvailableAt: fmtTime(t.AvailableAt), Created: stamp(t.CreatedAt), Started: stampPtr(t.StartedAt),
		Finished: stampPtr(t.FinishedAt), LastError: currentError(t), RequeueOnInterrupt: t.RequeueOnInterrupt,
		TriggerRule: shortJSON(t.TriggerRule, 500),
		CanRetry:    t.Status == store.StatusFailed || t.Status == store.StatusCancelled,
		CanRequeue:  t.Status == store.StatusInterrupted,
		CanCancel:   !store.IsDone(t.Status),
	}
	if t.WorkerID != nil {
		info.Worker = "#" + strconv.FormatInt(*t.WorkerID, 10)
		info.LeaseExpires = fmtTimePtr(t.LeaseExpiresAt)
	}
	if t.ConcKey != nil {
		info.ConcKey = store.FlowKeyLabel(*t.ConcKey)
	}
	if t.RateKey != nil {
		info.RateKey = store.FlowKeyLabel(*t.RateKey)
	}
	return info
}

// flowKeyJSON is a flow-control key of a task in the JSON API.
type flowKeyJSON struct {
	Group    string `json:"group"`
	KeyValue string `json:"key_value"`
}

// taskFlowJSON is a task's flow-control keys in the JSON API, each nil
// when it has none.
type taskFlowJSON struct {
	Concurrency *flowKeyJSON `json:"concurrency"`
	Rate        *flowKeyJSON `json:"rate"`
}

func taskFlow(t *store.Task) taskFlowJSON {
	key := func(k *string) *flowKeyJSON {
		if k == nil {
			return nil
		}
		g, v := store.SplitFlowKey(*k)
		return &flowKeyJSON{Group: g, KeyValue: v}
	}
	return taskFlowJSON{Concurrency: key(t.ConcKey), Rate: key(t.RateKey)}
}

// flowHoldRows are a queue's flow holds as the queues page shows them.
func flowHoldRows(hs []store.FlowHold) []templates.FlowHoldRow {
	out := make([]templates.FlowHoldRow, len(hs))
	for i, h := range hs {
		out[i] = templates.FlowHoldRow{Kind: h.Kind, Key: store.FlowKeyLabel(h.Key), Detail: h.Detail}
	}
	return out
}

func eventRows(evs []store.Event, names map[int64]string) []templates.EventRow {
	out := make([]templates.EventRow, len(evs))
	for i, e := range evs {
		row := templates.EventRow{
			ID: e.ID, TaskID: e.TaskID, TaskName: names[e.TaskID], From: deref(e.From), To: e.To,
			At: stamp(e.At), Attempt: e.Attempt, Error: clip(deref(e.Error), 300),
		}
		if row.Error == "" {
			row.Error = detailReason(e.Detail)
		}
		if e.WorkerID != nil {
			row.Worker = "#" + strconv.FormatInt(*e.WorkerID, 10)
		}
		out[i] = row
	}
	return out
}

// attemptDetail is what an attempt's end event stores in detail.
type attemptDetail struct {
	Log []struct {
		At    time.Time      `json:"at"`
		Level string         `json:"level"`
		Msg   string         `json:"msg"`
		Attrs map[string]any `json:"attrs"`
	} `json:"log"`
	Stack  string `json:"stack"`
	Reason string `json:"reason"`
	// Actor is who asked for an admin action.
	Actor *engine.Actor `json:"actor"`
}

// reason is the detail's reason, with who asked for it.
func (d attemptDetail) reason() string {
	if d.Actor == nil || d.Actor.Name == "" {
		return d.Reason
	}
	by := d.Actor.Name
	if d.Actor.Role != "" && d.Actor.Role != d.Actor.Name {
		by += " (" + d.Actor.Role + ")"
	}
	if d.Actor.Addr != "" {
		by += " from " + d.Actor.Addr
	}
	return strings.TrimSpace(d.Reason + " by " + by)
}

func detailReason(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var d attemptDetail
	if json.Unmarshal(raw, &d) != nil {
		return ""
	}
	return d.reason()
}

func attemptRows(as []store.TaskAttempt, t *store.Task) []templates.AttemptRow {
	out := make([]templates.AttemptRow, 0, len(as)+1)
	for _, a := range as {
		row := templates.AttemptRow{
			Attempt: a.Attempt, Outcome: a.Outcome, Label: a.Outcome, Started: stampPtr(a.StartedAt),
			Ended: stamp(a.EndedAt), Error: deref(a.Error),
		}
		if a.Outcome == store.StatusReady {
			row.Label = "retried" // failed with attempts left, or requeued after an interrupt
		}
		if a.StartedAt != nil {
			row.Duration = fmtDuration(a.EndedAt.Sub(*a.StartedAt))
		}
		if a.WorkerID != nil {
			row.Worker = "#" + strconv.FormatInt(*a.WorkerID, 10)
		}
		var d attemptDetail
		if len(a.Detail) > 0 && json.Unmarshal(a.Detail, &d) == nil {
			row.Stack, row.Reason = d.Stack, d.reason()
			for _, l := range d.Log {
				keys := slices.Sorted(maps.Keys(l.Attrs))
				attrs := make([]string, len(keys))
				for i, k := range keys {
					attrs[i] = fmt.Sprintf("%s=%v", k, l.Attrs[k])
				}
				row.Log = append(row.Log, templates.LogLine{
					At: l.At.UTC().Format("15:04:05.000"), Level: l.Level, Msg: l.Msg, Attrs: strings.Join(attrs, " "),
				})
			}
		}
		out = append(out, row)
	}
	// Only the latest attempt of a task that has not completed holds its
	// current error; the others were followed by another attempt (or the
	// task completed since).
	for i := range out {
		out[i].PastError = out[i].Error != "" && (i < len(out)-1 || t.Status == store.StatusCompleted)
	}
	if t.Status == store.StatusRunning || t.Status == store.StatusDeferred {
		if n := len(out); n > 0 {
			out[n-1].PastError = out[n-1].Error != ""
		}
		row := templates.AttemptRow{Attempt: t.Attempt, Outcome: t.Status, InProgress: true, Started: stampPtr(t.StartedAt)}
		if t.WorkerID != nil {
			row.Worker = "#" + strconv.FormatInt(*t.WorkerID, 10)
		}
		out = append(out, row)
	}
	return out
}

// taskContext is a task's context as its handler reads it (see
// rule.Merge); a run input that is not an object is left out.
func taskContext(input json.RawMessage, deps []store.Task) json.RawMessage {
	outputs := make([]json.RawMessage, len(deps))
	for i, d := range deps {
		outputs[i] = d.Output
	}
	merged, _ := rule.Merge(input, outputs...)
	return merged
}
