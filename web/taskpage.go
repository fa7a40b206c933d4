package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// The task page's durable waits: the journaled steps, the durable wait
// the task is parked in, its signals, and the Send signal form.

const (
	// stepsShown caps the journaled steps a task page lists.
	stepsShown = 200
	// signalsShown caps the pending and the consumed signals it lists.
	signalsShown = 50
	// internalStepPrefix starts the engine's own journal entries.
	internalStepPrefix = "cairn:"
)

// durableWaitJSON is the durable wait of a task in the JSON API.
type durableWaitJSON struct {
	Kind  string     `json:"kind"`
	Name  string     `json:"name,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	// Children counts the task's child runs and the finished ones, for a
	// wait for runs.
	Children *store.ChildProgress `json:"children,omitempty"`
	Text     string               `json:"text"`
}

// durableWait says the durable wait a deferred task is parked in; nil
// when it is in none.
func durableWait(t *store.Task, children *store.ChildProgress, now time.Time) *durableWaitJSON {
	if t.Status != store.StatusDeferred || t.WaitKind == nil {
		return nil
	}
	w := &durableWaitJSON{Kind: *t.WaitKind, Name: deref(t.WaitName), Until: t.WaitUntil, Since: t.WaitSince}
	switch w.Kind {
	case store.WaitKindSleep:
		w.Text = "sleeping"
		if w.Until != nil {
			w.Text = "sleeping until " + fmtWhen(*w.Until, now)
		}
	case store.WaitKindSignal:
		w.Text = "waiting for signal " + strconv.Quote(w.Name)
		if w.Until != nil {
			w.Text += " (timeout at " + fmtWhen(*w.Until, now) + ")"
		} else {
			w.Text += " (no timeout)"
		}
	case store.WaitKindRuns:
		if children != nil && children.Total > 0 {
			w.Children = children
			w.Text = fmt.Sprintf("waiting for child runs: %d/%d done", children.Done, children.Total)
		} else {
			w.Text = "waiting for " + w.Name + " to finish"
		}
	default:
		w.Text = "waiting (" + w.Kind + ")"
	}
	return w
}

// conditionJSON is the DeferUntil condition of a task in the JSON API.
type conditionJSON struct {
	EveryMs int64      `json:"every_ms"`
	Since   *time.Time `json:"since,omitempty"`
	// LastCheck is known only to the process that holds the task (checks
	// are kept in its memory); HeldBy is that process's worker id.
	LastCheck *time.Time `json:"last_check,omitempty"`
	HeldBy    *int64     `json:"held_by,omitempty"`
	Text      string     `json:"text"`
}

// condition says the DeferUntil condition a deferred task is parked in;
// nil when it is in none (or in a durable wait).
func (s *Server) condition(t *store.Task) *conditionJSON {
	if t.Status != store.StatusDeferred || t.WaitKind != nil || t.WaitEveryMs == nil {
		return nil
	}
	every := time.Duration(*t.WaitEveryMs) * time.Millisecond
	c := &conditionJSON{EveryMs: *t.WaitEveryMs, Since: t.WaitSince, HeldBy: t.WorkerID,
		Text: "Waits for its condition (DeferUntil): checked every " + fmtDuration(every)}
	if at, ok := s.eng.LastCheck(t.ID); ok {
		c.LastCheck = &at
	}
	switch {
	case c.LastCheck != nil:
		c.Text += "; last check " + fmtAge(s.clock().Sub(*c.LastCheck).Seconds())
	case t.WorkerID != nil:
		c.Text += "; last check: not known here (held by worker " + strconv.FormatInt(*t.WorkerID, 10) + ")"
	default:
		c.Text += "; last check: not known here"
	}
	return c
}

// conditionRow is condition for the task page.
func (s *Server) conditionRow(t *store.Task) *templates.ConditionWait {
	c := s.condition(t)
	if c == nil {
		return nil
	}
	out := &templates.ConditionWait{Every: fmtDuration(time.Duration(c.EveryMs) * time.Millisecond), Since: stampPtr(c.Since),
		LastCheck: stampPtr(c.LastCheck), HeldBy: "–"}
	if c.HeldBy != nil {
		out.HeldBy = strconv.FormatInt(*c.HeldBy, 10)
	}
	return out
}

// checkWakeable refuses to wake a task that is not deferred: there is
// nothing to check (and an unknown task is not found).
func (s *Server) checkWakeable(ctx context.Context, id int64) error {
	t, err := s.st.TaskGet(ctx, id)
	if err != nil {
		return notFoundAs(err, "task %d not found", id)
	}
	if t.Status != store.StatusDeferred {
		return fmt.Errorf("%w: task %d is %s, not deferred: it waits for no condition to check", engine.ErrInvalidState, id, t.Status)
	}
	return nil
}

// fmtWhen renders a time as absolute and relative to now:
// "2025-01-02 15:04:05 UTC (in 3m)".
func fmtWhen(t, now time.Time) string {
	return fmtTime(t) + " UTC (" + fmtRelative(t.Sub(now)) + ")"
}

// fmtRelative renders a span from now, d before now when negative: "36 s
// ago", "in 3 min", "2 h ago", "3 d ago". It is the site's one relative
// time format: the browser renders <time data-rel> the same way (app.js).
func fmtRelative(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s > 0 && s < 5 {
		s = 0 // clocks a little apart
	}
	future := s > 0
	if s < 0 {
		s = -s
	}
	var t string
	switch {
	case s < 60:
		t = strconv.FormatInt(s, 10) + " s"
	case s < 3600:
		t = strconv.FormatInt(s/60, 10) + " min"
	case s < 48*3600:
		t = strconv.FormatInt(s/3600, 10) + " h"
	default:
		t = strconv.FormatInt(s/86400, 10) + " d"
	}
	if future {
		return "in " + t
	}
	return t + " ago"
}

// fmtBytes renders a size: "512 B", "3.2 KiB".
func fmtBytes(n int64) string {
	switch {
	case n < 1024:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
}

// stepJSON is a journaled step in the JSON API.
type stepJSON struct {
	store.StepInfo
	// Words says an engine-internal entry in plain words.
	Words string `json:"words,omitempty"`
}

// stepWords says an engine-internal journal entry in plain words; "" for
// the handler's own steps and entries it cannot read.
func stepWords(s store.StepInfo) string {
	rest, ok := strings.CutPrefix(s.Name, internalStepPrefix)
	if !ok {
		return ""
	}
	var r struct {
		Until   *time.Time `json:"until"`
		Signal  int64      `json:"signal"`
		Timeout bool       `json:"timeout"`
		Run     int64      `json:"run"`
	}
	if len(s.Internal) > 0 {
		_ = json.Unmarshal(s.Internal, &r) // an unreadable entry shows by name only
	}
	until := func(what string) string {
		if r.Until == nil {
			return what + " (no timeout)"
		}
		return what + " until " + fmtTime(*r.Until) + " UTC"
	}
	switch {
	case strings.HasPrefix(rest, "sleep#"):
		if r.Until == nil {
			return "sleep"
		}
		return "sleep until " + fmtTime(*r.Until) + " UTC"
	case strings.HasPrefix(rest, "signal#") && strings.HasSuffix(rest, "/wait"):
		return until("wait for a signal")
	case strings.HasPrefix(rest, "signal#"):
		switch {
		case r.Timeout:
			return "signal wait timed out"
		case s.Signal != "":
			return "signal " + strconv.Quote(s.Signal) + " received (#" + strconv.FormatInt(r.Signal, 10) + ")"
		case r.Signal != 0:
			return "signal #" + strconv.FormatInt(r.Signal, 10) + " received"
		}
		return "signal received"
	case strings.HasPrefix(rest, "runs#"):
		return "wait for runs to finish"
	case strings.HasPrefix(rest, "spawn/"):
		name := strings.TrimPrefix(rest, "spawn/")
		if r.Run == 0 {
			return "spawned " + strconv.Quote(name)
		}
		return "spawned run #" + strconv.FormatInt(r.Run, 10) + " (" + strconv.Quote(name) + ")"
	}
	return ""
}

func stepsJSON(steps []store.StepInfo) []stepJSON {
	out := make([]stepJSON, len(steps))
	for i, s := range steps {
		out[i] = stepJSON{StepInfo: s, Words: stepWords(s)}
	}
	return out
}

func stepRows(steps []store.StepInfo) []templates.StepRow {
	out := make([]templates.StepRow, len(steps))
	for i, s := range steps {
		out[i] = templates.StepRow{Name: s.Name, Words: stepWords(s), Attempt: s.Attempt, At: fmtTime(s.At), Size: fmtBytes(s.Size)}
	}
	return out
}

func signalRows(sigs []store.SignalInfo) []templates.SignalRow {
	out := make([]templates.SignalRow, len(sigs))
	for i, g := range sigs {
		out[i] = templates.SignalRow{ID: g.ID, Name: g.Name, Sent: fmtTime(g.SentAt), Size: fmtBytes(g.Size),
			Consumed: fmtTimePtr(g.ConsumedAt), Attempt: deref(g.ConsumedAttempt)}
	}
	return out
}

// more counts the rows of a capped list that were not read.
func more[T any](rows []T, of func(T) int64) int64 {
	return total(rows, of) - int64(len(rows))
}

// checkSignal checks a signal's name and payload as the API and the form
// take them; a nil name is missing.
func checkSignal(name *string, payload json.RawMessage) error {
	switch {
	case name == nil:
		return fieldError("name", "name: required: the name of the signal the task waits for")
	case *name == "":
		return fieldError("name", "name: must not be empty")
	case len(*name) > maxSignalName:
		return fieldError("name", "name: %d bytes long, at most %d", len(*name), maxSignalName)
	case len(payload) > 0 && !json.Valid(payload):
		return fieldError("payload", "payload: not valid JSON")
	}
	return nil
}

// maxSignalName is the longest signal name the engine takes, in bytes.
const maxSignalName = 200

// signalFormPost serves the Send signal form of a task page: it sends the
// signal through the engine and redirects back to the task page with a
// flash saying what was sent, or shows the page again with the error
// beside its field (a finished task: the message above the form) and the
// values as typed.
func (s *Server) signalFormPost(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := templates.SignalForm{Name: r.PostFormValue("name"), Payload: r.PostFormValue("payload")}
	name := strings.TrimSpace(f.Name)
	payload := json.RawMessage(strings.TrimSpace(f.Payload))
	err = checkSignal(&name, payload)
	if err == nil {
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		err = s.eng.SendSignal(r.Context(), id, name, payload)
		if errors.Is(err, engine.ErrInputTooLarge) {
			err = &httpError{status: http.StatusRequestEntityTooLarge, msg: err.Error(), field: "payload"}
		}
	}
	if err == nil {
		// Sent: back to the task page with a flash (a reload of it does
		// not send the signal again).
		setFlash(w, r, false, "Signal "+strconv.Quote(name)+" sent to task #"+strconv.FormatInt(id, 10)+".")
		http.Redirect(w, r, "/tasks/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
		return
	}
	status := http.StatusOK
	{
		st, msg := statusOf(err)
		if st < 400 || st >= 500 || st == http.StatusNotFound {
			s.fail(w, r, err)
			return
		}
		s.logFailure(r, st, err)
		status = st
		var he *httpError
		if errors.As(err, &he) {
			f.Error.Field = he.field
		}
		f.Error.Message = msg
	}
	d, err := s.taskDetail(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.renderTaskPage(w, r, status, d, f)
}

// total is the Total of a capped list's rows (0 when empty).
func total[T any](rows []T, of func(T) int64) int64 {
	if len(rows) == 0 {
		return 0
	}
	return of(rows[0])
}
