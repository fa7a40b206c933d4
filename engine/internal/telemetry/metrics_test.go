package telemetry

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// value reads a counter's or a gauge's value (prometheus/testutil would
// add a module to go.mod).
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

// Dashboards and the engine's tests read these names, labels and
// buckets: they must not change.
func TestMetricNamesAndLabels(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"cairn_task_transitions_total":    {"from", "to"},
		"cairn_claim_duration_seconds":    nil,
		"cairn_task_duration_seconds":     {"workflow", "task", "outcome"},
		"cairn_slots_in_use":              {"queue"},
		"cairn_slots":                     {"queue"},
		"cairn_xmin_horizon_age":          nil,
		"cairn_xmin_horizon_held_seconds": nil,
	}
	// Vectors show in a gathering once they have a series.
	CountTransition("names-from", "names-to", 1)
	TaskDuration.WithLabelValues("names-w", "names-t", OutcomeCompleted).Observe(0)
	SlotsInUse.WithLabelValues("names-q").Set(0)
	SlotsTotal.WithLabelValues("names-q").Set(0)
	fams, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	got := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		got[f.GetName()] = f
	}
	for name, labels := range want {
		f := got[name]
		require.NotNil(t, f, name)
		require.NotEmpty(t, f.GetHelp(), name)
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		require.ElementsMatch(t, labels, names, name)
	}

	claim := got["cairn_claim_duration_seconds"].GetMetric()[0].GetHistogram().GetBucket()
	require.Len(t, claim, 57, "0.5 ms to 8.2 s, four to a doubling")
	require.InDelta(t, 0.0005, claim[0].GetUpperBound(), 1e-12)
	require.InDelta(t, 8.192, claim[56].GetUpperBound(), 1e-9)
	task := got["cairn_task_duration_seconds"].GetMetric()[0].GetHistogram().GetBucket()
	require.Len(t, task, 12)
	require.InDelta(t, 0.001, task[0].GetUpperBound(), 1e-12)
	require.InDelta(t, 0.001*4, task[1].GetUpperBound(), 1e-12)
}

func TestCountMovesCountsEachMove(t *testing.T) {
	t.Parallel()
	a := transitions.WithLabelValues("count-a", "count-b")
	b := transitions.WithLabelValues("count-b", "count-c")
	CountMoves(
		[]store.Moved{{From: "count-a", To: "count-b"}, {From: "count-a", To: "count-b"}},
		nil,
		[]store.Moved{{From: "count-b", To: "count-c"}},
	)
	require.Equal(t, 2.0, value(t, a))
	require.Equal(t, 1.0, value(t, b))

	c := transitions.WithLabelValues("count-x", "count-y")
	CountTransition("count-x", "count-y", 5)
	CountTransition("count-x", "count-y", 0)
	CountTransition("count-x", "count-y", -1)
	require.Equal(t, 5.0, value(t, c))
}

// Not parallel: the horizon gauges are process-wide.
func TestObserveHorizonSetsTheGauges(t *testing.T) {
	ObserveHorizon(store.Horizon{Age: 1234}, 90*time.Second)
	require.Equal(t, 1234.0, value(t, horizonAge))
	require.Equal(t, 90.0, value(t, horizonHeld))
	ObserveHorizon(store.Horizon{}, 0)
	require.Zero(t, value(t, horizonAge))
	require.Zero(t, value(t, horizonHeld))
}

func TestAttemptOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		item           store.TransitionItem
		lost, shutdown bool
		want           string
	}{
		{store.TransitionItem{}, true, false, OutcomeLost},
		{store.TransitionItem{}, false, false, OutcomeCancelled},
		{store.TransitionItem{}, false, true, OutcomeCancelled},
		{store.TransitionItem{TaskID: 1, To: store.StatusCompleted}, true, true, OutcomeCompleted},
		{store.TransitionItem{TaskID: 1, To: store.StatusFailed}, false, true, OutcomeFailed},
		{store.TransitionItem{TaskID: 1, To: store.StatusInterrupted}, false, false, OutcomeInterrupted},
		{store.TransitionItem{TaskID: 1, To: store.StatusReady}, false, true, OutcomeInterrupted},
		{store.TransitionItem{TaskID: 1, To: store.StatusReady}, true, false, OutcomeRetried},
	} {
		require.Equal(t, c.want, AttemptOutcome(c.item, c.lost, c.shutdown), "%+v", c)
	}
}
