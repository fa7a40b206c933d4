package telemetry

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cairnhq/cairn/store"
)

// claimBuckets are the claim histogram's bounds: 0.5 ms to 8.2 s, four
// to a doubling. A quantile is interpolated within its bucket, and in
// the falling tail of a latency distribution that errs high: with one
// bucket to a doubling a p99 read 10-20% above the exact one (the bloat
// scenario's claim p99 is read from this histogram).
var claimBuckets = prometheus.ExponentialBuckets(0.0005, math.Pow(2, 0.25), 57)

// Process-wide metrics, registered with the default Prometheus registry
// (the server's /metrics serves them).
var (
	transitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cairn", Name: "task_transitions_total",
		Help: "Task transitions committed by this process (claims, deferrals, completions, retries, rescues, admin actions and the dependents they release), by from and to state.",
	}, []string{"from", "to"})
	// ClaimLatency is the time of each claim statement.
	ClaimLatency = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "claim_duration_seconds",
		Help:    "Time of one claim statement.",
		Buckets: claimBuckets,
	})
	// TaskDuration is the duration of task attempts, by workflow, task
	// and outcome (AttemptOutcome).
	TaskDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "task_duration_seconds",
		Help:    "Duration of task attempts, by workflow, task and outcome (completed, failed, retried, interrupted, cancelled, lost).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
	}, []string{"workflow", "task", "outcome"})
	// SlotsInUse is the slots in use by this process, by queue.
	SlotsInUse = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cairn", Name: "slots_in_use",
		Help: "Slots in use by this process, by queue.",
	}, []string{"queue"})
	// SlotsTotal is the slot capacity of this process, by queue.
	SlotsTotal = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cairn", Name: "slots",
		Help: "Slot capacity of this process, by queue.",
	}, []string{"queue"})
	horizonAge = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: "cairn", Name: "xmin_horizon_age",
		Help: "Age, in transactions, of the oldest snapshot of the database (0: none), as the horizon watch last read it.",
	})
	horizonHeld = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: "cairn", Name: "xmin_horizon_held_seconds",
		Help: "How long the oldest snapshot of the database has held back vacuum, as the horizon watch last saw it (0 when it moves).",
	})
)

// ObserveHorizon sets the horizon gauges from a reading of the horizon
// watch.
func ObserveHorizon(h store.Horizon, heldFor time.Duration) {
	horizonAge.Set(float64(h.Age))
	horizonHeld.Set(heldFor.Seconds())
}

// CountMoves adds committed moves to the transitions metric. Every task
// write of the engine reports its moves here.
func CountMoves(moves ...[]store.Moved) {
	for _, ms := range moves {
		for _, m := range ms {
			CountTransition(m.From, m.To, 1)
		}
	}
}

// CountTransition adds n committed moves from -> to.
func CountTransition(from, to string, n int) {
	if n > 0 {
		transitions.WithLabelValues(from, to).Add(float64(n))
	}
}

// Outcomes of an attempt, the outcome label of the task duration metric
// and the cairn.outcome attribute of its span.
const (
	OutcomeCompleted   = "completed"   // the handler returned nil
	OutcomeFailed      = "failed"      // failed for good
	OutcomeRetried     = "retried"     // failed with attempts left: back to ready
	OutcomeInterrupted = "interrupted" // stopped by shutdown (parked or requeued)
	OutcomeCancelled   = "cancelled"   // taken away: cancelled, or rescued by another worker
	OutcomeLost        = "lost"        // this worker's heartbeat found its lease gone
)

// AttemptOutcome names the outcome of an attempt that ends by writing
// item (zero when nothing is written: the task was taken away); lost
// tells that its handler context's cause was the heartbeat's finding its
// lease gone, shutdown that it was cancelled by a shutdown.
func AttemptOutcome(item store.TransitionItem, lost, shutdown bool) string {
	switch {
	case item.TaskID == 0 && lost:
		return OutcomeLost
	case item.TaskID == 0:
		return OutcomeCancelled
	case item.To == store.StatusCompleted:
		return OutcomeCompleted
	case item.To == store.StatusFailed:
		return OutcomeFailed
	case item.To == store.StatusInterrupted, shutdown:
		return OutcomeInterrupted
	}
	return OutcomeRetried
}
