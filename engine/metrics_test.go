package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// metric returns the metric family name's series whose labels include
// labels, from the default registry (where the engine registers its
// metrics), or nil.
func metric(t testing.TB, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// transitionCount reads cairn_task_transitions_total{from, to}. Other
// tests move tasks meanwhile, so callers compare increases, never totals.
func transitionCount(t testing.TB, from, to string) float64 {
	m := metric(t, "cairn_task_transitions_total", map[string]string{"from": from, "to": to})
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// durationCount reads how many attempts cairn_task_duration_seconds
// observed for one workflow, task and outcome.
func durationCount(t testing.TB, workflow, task, outcome string) uint64 {
	m := metric(t, "cairn_task_duration_seconds", map[string]string{"workflow": workflow, "task": task, "outcome": outcome})
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

// uniqueName makes a workflow name no other test uses, so that metric
// series labelled with it are this test's alone.
var uniqueSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano(), uniqueSeq.Add(1))
}

func TestTransitionsMetricCountsEveryMove(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	var open atomic.Bool
	deferred := make(chan int64, 1)
	wf := uniqueName("metric_moves")
	require.NoError(t, e.eng.Register(engine.Workflow{Name: wf, Tasks: []engine.Task{
		{Name: "park", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			select {
			case deferred <- h.TaskID():
			default:
			}
			return h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, time.Hour)
		}},
		{Name: "after", Deps: []string{"park"}, Run: func(ctx context.Context, h *engine.TaskHandle) error {
			return engine.Permanent(errors.New("fails for the admin to retry"))
		}},
	}}))
	moves := [][2]string{
		{store.StatusReady, store.StatusRunning},
		{store.StatusRunning, store.StatusDeferred},
		{store.StatusDeferred, store.StatusRunning},
		{store.StatusRunning, store.StatusCompleted},
		{store.StatusNotStarted, store.StatusReady},
		{store.StatusRunning, store.StatusFailed},
		{store.StatusFailed, store.StatusReady},
	}
	before := map[[2]string]float64{}
	for _, m := range moves {
		before[m] = transitionCount(t, m[0], m[1])
	}
	start(t, e.eng)
	run, err := e.eng.Enqueue(ctx, wf, nil)
	require.NoError(t, err)
	var parkID int64
	select {
	case parkID = <-deferred:
	case <-time.After(20 * time.Second):
		t.Fatal("the task never started")
	}
	eventually(t, 10*time.Second, "task to be deferred", func() bool {
		tk, err := e.st.TaskGet(ctx, parkID)
		require.NoError(t, err)
		return tk.Status == store.StatusDeferred
	})
	open.Store(true)
	require.NoError(t, e.eng.Signal(ctx, parkID))
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	after := taskByName(t, e.st, run.ID, "after")
	require.NoError(t, e.eng.RetryTask(ctx, after.ID))

	for _, m := range moves {
		require.Greater(t, transitionCount(t, m[0], m[1]), before[m], "cairn_task_transitions_total{from=%q,to=%q}", m[0], m[1])
	}
}

func TestTaskDurationOutcomes(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	wf := uniqueName("metric_outcome")
	var calls atomic.Int32
	require.NoError(t, e.eng.Register(engine.Workflow{Name: wf, Tasks: []engine.Task{{
		Name:  "flaky",
		Retry: engine.RetryPolicy{MaxAttempts: 3, InitialDelay: 10 * time.Millisecond, NoJitter: true},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			if calls.Add(1) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		},
	}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), wf, nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)

	require.EqualValues(t, 1, durationCount(t, wf, "flaky", "retried"))
	require.EqualValues(t, 1, durationCount(t, wf, "flaky", "completed"))
	require.EqualValues(t, 0, durationCount(t, wf, "flaky", "ready"), "a retried attempt is not labelled with the state it goes to")
}

// recordingHandler keeps every log record, for tests that check what was
// logged.
type recordingHandler struct {
	mu      *sync.Mutex
	records *[]slog.Record
	attrs   []slog.Attr
}

func newRecorder() *recordingHandler {
	return &recordingHandler{mu: new(sync.Mutex), records: new([]slog.Record)}
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.records = append(*h.records, r)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

// find returns the attributes of the records with message msg.
func (h *recordingHandler) find(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range *h.records {
		if r.Message != msg {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

func TestAdminActionsRecordTheActor(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	e := setup(t, func(c *engine.Config) { c.Logger = slog.New(rec); c.NoWorker = true })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "audit", Tasks: []engine.Task{{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	start(t, e.eng)
	actor := engine.Actor{Name: "alice", Role: "admin", Addr: "192.0.2.7:4242"}
	ctx := engine.WithActor(context.Background(), actor)
	got, ok := engine.ActorFrom(ctx)
	require.True(t, ok)
	require.Equal(t, actor, got)

	run, err := e.eng.Enqueue(ctx, "audit", nil)
	require.NoError(t, err)
	task := taskByName(t, e.st, run.ID, "a")
	require.NoError(t, e.eng.CancelTask(ctx, task.ID))
	require.NoError(t, e.eng.RetryTask(ctx, task.ID))

	events, err := e.st.EventListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	require.Len(t, events, 3) // created, cancelled, retried
	for _, ev := range events {
		var d struct {
			Reason string       `json:"reason"`
			Actor  engine.Actor `json:"actor"`
		}
		require.NoError(t, json.Unmarshal(ev.Detail, &d), "event %s: %s", ev.To, ev.Detail)
		require.Equal(t, actor, d.Actor, "event to %s", ev.To)
		require.NotEmpty(t, d.Reason)
	}

	lines := rec.find("admin action")
	actions := map[string]map[string]string{}
	for _, l := range lines {
		actions[l["action"]] = l
	}
	for _, a := range []string{"enqueue", "cancel_task", "retry_task"} {
		l, ok := actions[a]
		require.True(t, ok, "no log line for %s in %v", a, lines)
		require.Equal(t, "alice", l["actor"])
		require.Equal(t, "admin", l["role"])
		require.Equal(t, "192.0.2.7:4242", l["addr"])
	}
	require.Equal(t, fmt.Sprint(task.ID), actions["cancel_task"]["task"])

	// Without an actor, Go code is the actor.
	require.NoError(t, e.eng.CancelRun(context.Background(), run.ID))
	events, err = e.st.EventListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	var last struct {
		Actor engine.Actor `json:"actor"`
	}
	require.NoError(t, json.Unmarshal(events[len(events)-1].Detail, &last))
	require.Equal(t, engine.EmbeddedActor, last.Actor)
}

// TestClaimHistogramResolvesTheTail checks the claim histogram's bounds:
// from 0.5 ms to past 8 s, each at most 1.2 times the one before, so that
// a p99 interpolated within a bucket (as histogram_quantile and the bloat
// scenario read it) is not off by up to a doubling.
func TestClaimHistogramResolvesTheTail(t *testing.T) {
	m := metric(t, "cairn_claim_duration_seconds", nil)
	require.NotNil(t, m, "the claim histogram is registered")
	var bounds []float64
	for _, b := range m.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	require.NotEmpty(t, bounds)
	require.InDelta(t, 0.0005, bounds[0], 1e-9, "first bound")
	require.GreaterOrEqual(t, bounds[len(bounds)-1], 8.0, "last bound")
	for i := 1; i < len(bounds); i++ {
		require.LessOrEqual(t, bounds[i]/bounds[i-1], 1.2, "bound %d (%g s) after %g s", i, bounds[i], bounds[i-1])
	}
}
