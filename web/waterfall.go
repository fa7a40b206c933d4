package web

import (
	"strconv"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// This file turns a task's transitions into its timeline (the waits
// before its attempts, the attempts and their deferred stretches), and
// the timelines of a run's tasks into the run page's waterfall and the
// durations its DAG and tasks table show.

// span is a stretch of time; open when it lasts still (it ends now).
type span struct {
	start, end time.Time
	open       bool
}

func (s span) dur() time.Duration { return max(s.end.Sub(s.start), 0) }

// waitSpan is a stretch a task spent ready: its queue wait (and any
// retry delay) before an attempt.
type waitSpan struct {
	span
	// next is the attempt it led to; 0 when none (yet).
	next int
}

// attemptSpan is one attempt of a task: from its claim to its end.
type attemptSpan struct {
	span
	attempt int
	// outcome is the state it ended in (completed, failed, interrupted,
	// cancelled, or retried: back to ready); running or deferred while it
	// lasts.
	outcome string
	// deferred are its stretches in deferred, when it held no slot.
	deferred []span
}

// taskTimeline is what a task spent its time on, oldest first.
type taskTimeline struct {
	waits    []waitSpan
	attempts []attemptSpan
}

// outcomeRetried is the outcome of an attempt that went back to ready.
const outcomeRetried = "retried"

// buildTimeline reads a task's transitions, oldest first. A task's first
// state dates from its creation: the creation record when there is one,
// else created (a task row is its own creation record). Whatever lasts
// still (the task is ready, running or deferred) ends at now.
func buildTimeline(created time.Time, status string, trs []store.Transition, now time.Time) taskTimeline {
	var tl taskTimeline
	state, since := status, created
	switch {
	case len(trs) > 0 && trs[0].From == "":
		state, since, trs = trs[0].To, trs[0].At, trs[1:]
	case len(trs) > 0:
		state = trs[0].From
	}
	var cur *attemptSpan
	begin := func(at time.Time, attempt int) {
		if cur == nil {
			cur = &attemptSpan{span: span{start: at}, attempt: attempt}
		}
	}
	for _, tr := range trs {
		switch state {
		case store.StatusReady:
			w := waitSpan{span: span{start: since, end: tr.At}}
			if tr.To == store.StatusRunning {
				w.next = tr.Attempt
			}
			tl.waits = append(tl.waits, w)
		case store.StatusDeferred:
			begin(since, tr.Attempt)
			cur.deferred = append(cur.deferred, span{start: since, end: tr.At})
		}
		active := state == store.StatusRunning || state == store.StatusDeferred
		switch {
		case tr.To == store.StatusRunning && state != store.StatusDeferred:
			// A claim starts an attempt.
			if cur != nil { // an attempt without its end: close it here
				cur.end, cur.outcome = since, state
				tl.attempts = append(tl.attempts, *cur)
				cur = nil
			}
			begin(tr.At, tr.Attempt)
		case tr.To == store.StatusRunning || tr.To == store.StatusDeferred:
			begin(since, tr.Attempt) // deferral or resumption: the same attempt
		case active:
			begin(since, tr.Attempt)
			cur.end, cur.outcome = tr.At, tr.To
			if tr.To == store.StatusReady {
				cur.outcome = outcomeRetried
			}
			tl.attempts = append(tl.attempts, *cur)
			cur = nil
		}
		state, since = tr.To, tr.At
	}
	switch state {
	case store.StatusReady:
		tl.waits = append(tl.waits, waitSpan{span: span{start: since, end: now, open: true}})
	case store.StatusRunning, store.StatusDeferred:
		attempt := 0
		if len(trs) > 0 {
			attempt = trs[len(trs)-1].Attempt
		}
		begin(since, attempt)
		if state == store.StatusDeferred {
			cur.deferred = append(cur.deferred, span{start: since, end: now, open: true})
		}
		cur.end, cur.open, cur.outcome = now, true, state
		tl.attempts = append(tl.attempts, *cur)
	}
	return tl
}

// queueWait is the time the task spent ready.
func (tl taskTimeline) queueWait() time.Duration {
	var d time.Duration
	for _, w := range tl.waits {
		d += w.dur()
	}
	return d
}

// runTime is the time its attempts took, from claim to end.
func (tl taskTimeline) runTime() time.Duration {
	var d time.Duration
	for _, a := range tl.attempts {
		d += a.dur()
	}
	return d
}

// waitBefore is the wait that led to attempt n, if any.
func (tl taskTimeline) waitBefore(n int) (waitSpan, bool) {
	for _, w := range tl.waits {
		if w.next == n {
			return w, true
		}
	}
	return waitSpan{}, false
}

// runTimelines builds the timeline of each task of a run.
func runTimelines(tasks []store.Task, trs map[int64][]store.Transition, now time.Time) map[int64]taskTimeline {
	out := make(map[int64]taskTimeline, len(tasks))
	for _, t := range tasks {
		out[t.ID] = buildTimeline(t.CreatedAt, t.Status, trs[t.ID], now)
	}
	return out
}

// eventTransitions are a task's events as transitions.
func eventTransitions(evs []store.Event) []store.Transition {
	out := make([]store.Transition, len(evs))
	for i, e := range evs {
		out[i] = store.Transition{From: deref(e.From), To: e.To, Attempt: e.Attempt, At: e.At}
	}
	return out
}

// nodeDuration is what a DAG box says of a task's time: how long it has
// waited while ready, how long its attempt has run while running or
// deferred, and its total run time once it ran; "" when it never ran.
func nodeDuration(status string, tl taskTimeline) string {
	switch status {
	case store.StatusReady:
		if n := len(tl.waits); n > 0 && tl.waits[n-1].open {
			return "waiting " + fmtDuration(tl.waits[n-1].dur())
		}
		return ""
	case store.StatusRunning, store.StatusDeferred:
		if n := len(tl.attempts); n > 0 {
			return fmtDuration(tl.attempts[n-1].dur())
		}
		return ""
	case store.StatusNotStarted, store.StatusSkipped:
		return ""
	}
	if len(tl.attempts) == 0 {
		return ""
	}
	return fmtDuration(tl.runTime())
}

// Waterfall geometry, in SVG user units.
const (
	wfLabelW = 150 // the task names' column
	wfChartW = 760 // the time axis
	wfPadR   = 12
	wfAxisH  = 22 // the tick labels above the rows
	wfRowH   = 16
	wfBarH   = 10
	wfWaitH  = 4
	wfDeferH = 6
	wfMinW   = 2 // the narrowest bar drawn
	wfName   = 22
	wfTicks  = 6 // at most, besides 0
)

// wfSteps are the tick intervals the axis chooses from.
var wfSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// runWaterfall lays out the run's tasks as a Gantt chart: one row per
// task, one bar per attempt coloured by its outcome over the lighter wait
// before it, with its deferred stretches on top. The time axis runs from
// the run's creation to its end, or to now while it runs.
func runWaterfall(run *store.Run, tasks []store.Task, tls map[int64]taskTimeline, now time.Time) templates.Waterfall {
	t0, t1 := run.CreatedAt, run.CreatedAt
	if run.FinishedAt != nil {
		t1 = *run.FinishedAt
	}
	live := !store.RunIsFinished(run.Status)
	if live {
		t1 = now
	}
	for _, tl := range tls {
		for _, w := range tl.waits {
			t0, t1 = minTime(t0, w.start), maxTime(t1, w.end)
		}
		for _, a := range tl.attempts {
			t0, t1 = minTime(t0, a.start), maxTime(t1, a.end)
		}
	}
	total := max(t1.Sub(t0), time.Millisecond)
	x := func(t time.Time) int {
		return wfLabelW + int(float64(t.Sub(t0))/float64(total)*wfChartW)
	}
	bar := func(s span) (int, int) {
		x1, x2 := x(s.start), x(s.end)
		return x1, max(x2-x1, wfMinW)
	}
	wf := templates.Waterfall{
		Width: wfLabelW + wfChartW + wfPadR, Height: wfAxisH + len(tasks)*wfRowH + 4,
		Span: fmtDuration(t1.Sub(t0)), Live: live,
	}
	step := wfSteps[len(wfSteps)-1]
	for _, s := range wfSteps {
		if total/s <= wfTicks {
			step = s
			break
		}
	}
	for d := time.Duration(0); d <= total; d += step {
		label := "0"
		if d > 0 {
			label = "+" + fmtDuration(d)
		}
		wf.Ticks = append(wf.Ticks, templates.WaterfallTick{X: x(t0.Add(d)), Label: label})
	}
	for i, t := range tasks {
		tl := tls[t.ID]
		y := wfAxisH + i*wfRowH
		row := templates.WaterfallRow{
			TaskID: t.ID, Name: clip(t.Name, wfName), Href: "/tasks/" + strconv.FormatInt(t.ID, 10), Y: y,
			Title: t.Name + ": " + t.Status,
		}
		if len(tl.waits) > 0 || len(tl.attempts) > 0 {
			row.Title += ", waited " + fmtDuration(tl.queueWait()) + ", ran " + fmtDuration(tl.runTime())
		}
		for _, w := range tl.waits {
			sx, sw := bar(w.span)
			title := "waited " + fmtDuration(w.dur())
			if w.open {
				title = "waiting " + fmtDuration(w.dur())
			}
			if w.next > 0 {
				title += " before attempt " + strconv.Itoa(w.next)
			}
			row.Segs = append(row.Segs, templates.WaterfallSeg{Kind: "wait", X: sx, W: sw,
				Y: y + (wfRowH-wfWaitH)/2, H: wfWaitH, Title: title, Open: w.open})
		}
		for _, a := range tl.attempts {
			sx, sw := bar(a.span)
			title := "attempt " + strconv.Itoa(a.attempt) + ": " + a.outcome + " after " + fmtDuration(a.dur())
			if a.open {
				title = "attempt " + strconv.Itoa(a.attempt) + ": " + a.outcome + " for " + fmtDuration(a.dur())
			}
			row.Segs = append(row.Segs, templates.WaterfallSeg{Kind: "attempt", Status: a.outcome, Attempt: a.attempt,
				X: sx, W: sw, Y: y + (wfRowH-wfBarH)/2, H: wfBarH, Title: title, Open: a.open})
			for _, d := range a.deferred {
				dx, dw := bar(d)
				row.Segs = append(row.Segs, templates.WaterfallSeg{Kind: "deferred", Attempt: a.attempt,
					X: dx, W: dw, Y: y + (wfRowH-wfDeferH)/2, H: wfDeferH, Title: "deferred " + fmtDuration(d.dur()), Open: d.open})
			}
		}
		wf.Rows = append(wf.Rows, row)
	}
	return wf
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runTimes adds to a run page's live part the durations of the run and of
// its tasks (the tasks table and the DAG boxes) and its waterfall, all
// from the transitions of its tasks.
func runTimes(live *templates.RunLive, run *store.Run, tasks []store.Task, trs map[int64][]store.Transition, now time.Time) {
	tls := runTimelines(tasks, trs, now)
	if run.StartedAt != nil {
		end := now
		if run.FinishedAt != nil {
			end = *run.FinishedAt
		}
		live.Run.Duration = fmtDuration(end.Sub(*run.StartedAt))
	}
	byID := make(map[int64]store.Task, len(tasks))
	for _, t := range tasks {
		byID[t.ID] = t
	}
	for i, row := range live.Tasks {
		tl := tls[row.ID]
		if len(tl.waits) > 0 {
			live.Tasks[i].Wait = fmtDuration(tl.queueWait())
		}
		if len(tl.attempts) > 0 {
			live.Tasks[i].RunTime = fmtDuration(tl.runTime())
		}
	}
	for i, n := range live.DAG.Nodes {
		if t, ok := byID[n.TaskID]; ok {
			live.DAG.Nodes[i].Duration = nodeDuration(t.Status, tls[n.TaskID])
		}
	}
	live.Waterfall = runWaterfall(run, tasks, tls, now)
}

// taskTimes adds to a task page's live part its queue wait and run time,
// and the wait before each attempt and the time of the one in progress,
// from its events.
func taskTimes(live *templates.TaskLive, t *store.Task, evs []store.Event, now time.Time) {
	tl := buildTimeline(t.CreatedAt, t.Status, eventTransitions(evs), now)
	if len(tl.waits) > 0 {
		live.Task.QueueWait = fmtDuration(tl.queueWait())
	}
	if len(tl.attempts) > 0 {
		live.Task.RunTime = fmtDuration(tl.runTime())
	}
	for i, a := range live.Attempts {
		if w, ok := tl.waitBefore(a.Attempt); ok {
			live.Attempts[i].Wait = fmtDuration(w.dur())
		}
		if a.InProgress {
			if n := len(tl.attempts); n > 0 && tl.attempts[n-1].open {
				live.Attempts[i].Duration = fmtDuration(tl.attempts[n-1].dur())
			}
		}
	}
}
