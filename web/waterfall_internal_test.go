package web

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

func TestFmtDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0 ms"},
		{0, "0 ms"},
		{850 * time.Millisecond, "850 ms"},
		{999*time.Millisecond + 999*time.Microsecond, "999 ms"},
		{time.Second, "1 s"},
		{1050 * time.Millisecond, "1 s"},
		{1100 * time.Millisecond, "1.1 s"},
		{3249 * time.Millisecond, "3.2 s"},
		{9999 * time.Millisecond, "9.9 s"},
		{10 * time.Second, "10 s"},
		{59*time.Second + 900*time.Millisecond, "59 s"},
		{time.Minute, "1 min"},
		{4*time.Minute + 10*time.Second, "4 min 10 s"},
		{59*time.Minute + 59*time.Second, "59 min 59 s"},
		{time.Hour, "1 h"},
		{2*time.Hour + 3*time.Minute + 50*time.Second, "2 h 3 min"},
		{24 * time.Hour, "1 d"},
		{3*24*time.Hour + 4*time.Hour + 5*time.Minute, "3 d 4 h"},
	} {
		require.Equal(t, tc.want, fmtDuration(tc.d), "%s", tc.d)
	}
}

func TestBuildTimeline(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tr := func(from, to string, attempt int, s float64) store.Transition {
		return store.Transition{From: from, To: to, Attempt: attempt, At: at(s)}
	}
	sp := func(a, b float64) span { return span{start: at(a), end: at(b)} }
	open := func(a, b float64) span { return span{start: at(a), end: at(b), open: true} }
	const (
		ns, rd, rn, df = store.StatusNotStarted, store.StatusReady, store.StatusRunning, store.StatusDeferred
		ok, fl, cx, in = store.StatusCompleted, store.StatusFailed, store.StatusCancelled, store.StatusInterrupted
	)
	for _, tc := range []struct {
		name   string
		status string
		trs    []store.Transition
		now    float64
		want   taskTimeline
	}{
		{
			name: "created ready, claimed, completed", status: ok,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, ok, 1, 3)}, now: 10,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(0, 1), next: 1}},
				attempts: []attemptSpan{{span: sp(1, 3), attempt: 1, outcome: ok}},
			},
		},
		{
			name: "a creation record dates the first state", status: ok,
			trs: []store.Transition{tr("", rd, 0, 0.5), tr(rd, rn, 1, 1), tr(rn, ok, 1, 3)}, now: 10,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(0.5, 1), next: 1}},
				attempts: []attemptSpan{{span: sp(1, 3), attempt: 1, outcome: ok}},
			},
		},
		{
			name: "retried: two bars on one row, a wait before each", status: ok,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, rd, 1, 2), tr(rd, rn, 2, 4), tr(rn, ok, 2, 5)}, now: 10,
			want: taskTimeline{
				waits: []waitSpan{{span: sp(0, 1), next: 1}, {span: sp(2, 4), next: 2}},
				attempts: []attemptSpan{
					{span: sp(1, 2), attempt: 1, outcome: outcomeRetried},
					{span: sp(4, 5), attempt: 2, outcome: ok},
				},
			},
		},
		{
			name: "failed, retried by an admin, completed", status: ok,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, fl, 1, 2), tr(fl, rd, 1, 7), tr(rd, rn, 2, 8), tr(rn, ok, 2, 9)}, now: 10,
			want: taskTimeline{
				waits: []waitSpan{{span: sp(0, 1), next: 1}, {span: sp(7, 8), next: 2}},
				attempts: []attemptSpan{
					{span: sp(1, 2), attempt: 1, outcome: fl},
					{span: sp(8, 9), attempt: 2, outcome: ok},
				},
			},
		},
		{
			name: "deferred stretches stay inside their attempt", status: ok,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, df, 1, 2), tr(df, rn, 1, 5), tr(rn, df, 1, 5.5), tr(df, rn, 1, 6), tr(rn, ok, 1, 7)}, now: 10,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(0, 1), next: 1}},
				attempts: []attemptSpan{{span: sp(1, 7), attempt: 1, outcome: ok, deferred: []span{sp(2, 5), sp(5.5, 6)}}},
			},
		},
		{
			name: "running now: an open attempt", status: rn,
			trs: []store.Transition{tr(ns, rd, 0, 2), tr(rd, rn, 1, 3)}, now: 4.5,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(2, 3), next: 1}},
				attempts: []attemptSpan{{span: open(3, 4.5), attempt: 1, outcome: rn}},
			},
		},
		{
			name: "deferred now: an open attempt and an open deferred stretch", status: df,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, df, 1, 2)}, now: 6,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(0, 1), next: 1}},
				attempts: []attemptSpan{{span: open(1, 6), attempt: 1, outcome: df, deferred: []span{open(2, 6)}}},
			},
		},
		{
			name: "interrupted while deferred and requeued", status: rd,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, df, 1, 2), tr(df, rd, 1, 3)}, now: 5,
			want: taskTimeline{
				waits: []waitSpan{{span: sp(0, 1), next: 1}, {span: open(3, 5)}},
				attempts: []attemptSpan{
					{span: sp(1, 3), attempt: 1, outcome: outcomeRetried, deferred: []span{sp(2, 3)}},
				},
			},
		},
		{
			name: "parked interrupted", status: in,
			trs: []store.Transition{tr(rd, rn, 1, 1), tr(rn, in, 1, 3)}, now: 5,
			want: taskTimeline{
				waits:    []waitSpan{{span: sp(0, 1), next: 1}},
				attempts: []attemptSpan{{span: sp(1, 3), attempt: 1, outcome: in}},
			},
		},
		{
			name: "ready now, never transitioned", status: rd, now: 3,
			want: taskTimeline{waits: []waitSpan{{span: open(0, 3)}}},
		},
		{
			name: "waiting on dependencies: nothing yet", status: ns, now: 3,
		},
		{
			name: "cancelled while ready", status: cx,
			trs: []store.Transition{tr(rd, cx, 0, 2)}, now: 3,
			want: taskTimeline{waits: []waitSpan{{span: sp(0, 2)}}},
		},
		{
			name: "skipped", status: store.StatusSkipped,
			trs: []store.Transition{tr(ns, store.StatusSkipped, 0, 2)}, now: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := buildTimeline(t0, tc.status, tc.trs, at(tc.now))
			require.Equal(t, tc.want, got)
		})
	}
}

func TestNodeDuration(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	s := func(a, b time.Duration, open bool) span { return span{start: t0.Add(a), end: t0.Add(b), open: open} }
	retried := taskTimeline{
		waits: []waitSpan{{span: s(0, time.Second, false), next: 1}, {span: s(2*time.Second, 3*time.Second, false), next: 2}},
		attempts: []attemptSpan{
			{span: s(time.Second, 2*time.Second, false), attempt: 1, outcome: outcomeRetried},
			{span: s(3*time.Second, 5500*time.Millisecond, false), attempt: 2, outcome: store.StatusCompleted},
		},
	}
	require.Equal(t, "3.5 s", nodeDuration(store.StatusCompleted, retried), "run time of all attempts")
	require.Equal(t, 2*time.Second, retried.queueWait())
	require.Equal(t, "waiting 3 s", nodeDuration(store.StatusReady, taskTimeline{waits: []waitSpan{{span: s(0, 3*time.Second, true)}}}))
	require.Equal(t, "4 min 10 s", nodeDuration(store.StatusRunning, taskTimeline{attempts: []attemptSpan{{span: s(0, 250*time.Second, true)}}}))
	require.Empty(t, nodeDuration(store.StatusNotStarted, taskTimeline{}))
	require.Empty(t, nodeDuration(store.StatusCancelled, taskTimeline{waits: []waitSpan{{span: s(0, time.Second, false)}}}))
}

func TestRunWaterfallLayout(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	fin := at(10)
	run := &store.Run{ID: 1, Status: store.RunCompleted, CreatedAt: t0, StartedAt: &t0, FinishedAt: &fin}
	tasks := []store.Task{
		{ID: 11, Name: "a-task-with-a-rather-long-name", Status: store.StatusCompleted, CreatedAt: t0},
		{ID: 12, Name: "b", Status: store.StatusCompleted, CreatedAt: t0},
	}
	trs := map[int64][]store.Transition{
		11: {{From: "ready", To: "running", Attempt: 1, At: at(1)}, {From: "running", To: "ready", Attempt: 1, At: at(2)},
			{From: "ready", To: "running", Attempt: 2, At: at(4)}, {From: "running", To: "deferred", Attempt: 2, At: at(4.5)},
			{From: "deferred", To: "running", Attempt: 2, At: at(5)}, {From: "running", To: "completed", Attempt: 2, At: at(6)}},
		12: {{From: "not_started", To: "ready", At: at(6)}, {From: "ready", To: "running", Attempt: 1, At: at(6.001)},
			{From: "running", To: "completed", Attempt: 1, At: at(10)}},
	}
	wf := runWaterfall(run, tasks, runTimelines(tasks, trs, at(60)), at(60))
	require.False(t, wf.Live)
	require.Equal(t, "10 s", wf.Span, "a finished run's chart ends with it, not now")
	require.Len(t, wf.Rows, 2)
	require.Equal(t, "a-task-with-a-rather-…", wf.Rows[0].Name)
	require.Contains(t, wf.Rows[0].Title, "a-task-with-a-rather-long-name")
	kinds := func(r int) (bars []string, waits, deferred int) {
		for _, s := range wf.Rows[r].Segs {
			switch s.Kind {
			case "attempt":
				bars = append(bars, s.Status)
			case "wait":
				waits++
			case "deferred":
				deferred++
			}
			require.GreaterOrEqual(t, s.X, wfLabelW, "%+v", s)
			require.LessOrEqual(t, s.X+s.W, wfLabelW+wfChartW+wfMinW, "%+v", s)
			require.GreaterOrEqual(t, s.W, wfMinW)
			require.GreaterOrEqual(t, s.Y, wf.Rows[r].Y)
			require.LessOrEqual(t, s.Y+s.H, wf.Rows[r].Y+wfRowH)
		}
		return bars, waits, deferred
	}
	bars, waits, deferred := kinds(0)
	require.Equal(t, []string{outcomeRetried, store.StatusCompleted}, bars)
	require.Equal(t, 2, waits)
	require.Equal(t, 1, deferred)
	bars, waits, deferred = kinds(1)
	require.Equal(t, []string{store.StatusCompleted}, bars)
	require.Equal(t, 1, waits, "a 1 ms wait still shows")
	require.Zero(t, deferred)
	// The 10 s axis: ticks every 2 s from 0, the last at the right edge.
	require.Len(t, wf.Ticks, 6)
	require.Equal(t, "0", wf.Ticks[0].Label)
	require.Equal(t, wfLabelW, wf.Ticks[0].X)
	require.Equal(t, "+2 s", wf.Ticks[1].Label)
	require.Equal(t, wfLabelW+wfChartW, wf.Ticks[5].X)
	require.Equal(t, wfAxisH+2*wfRowH+4, wf.Height)

	// While the run runs, the chart ends now.
	run.Status, run.FinishedAt = store.RunRunning, nil
	wf = runWaterfall(run, tasks, runTimelines(tasks, trs, at(60)), at(60))
	require.True(t, wf.Live)
	require.Equal(t, "1 min", wf.Span)
}
