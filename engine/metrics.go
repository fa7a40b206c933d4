package engine

import (
	"errors"
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
	claimLatency = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "claim_duration_seconds",
		Help:    "Time of one claim statement.",
		Buckets: claimBuckets,
	})
	taskDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "task_duration_seconds",
		Help:    "Duration of task attempts, by workflow, task and outcome (completed, failed, retried, interrupted, cancelled, lost).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
	}, []string{"workflow", "task", "outcome"})
	slotsInUse = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cairn", Name: "slots_in_use",
		Help: "Slots in use by this process, by queue.",
	}, []string{"queue"})
	slotsTotal = promauto.NewGaugeVec(prometheus.GaugeOpts{
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

// observeHorizon sets the horizon gauges from a reading of the horizon
// watch.
func observeHorizon(h store.Horizon, heldFor time.Duration) {
	horizonAge.Set(float64(h.Age))
	horizonHeld.Set(heldFor.Seconds())
}

// countMoves adds committed moves to the transitions metric. Every task
// write of the engine reports its moves here.
func countMoves(moves ...[]store.Moved) {
	for _, ms := range moves {
		for _, m := range ms {
			countTransition(m.From, m.To, 1)
		}
	}
}

// countTransition adds n committed moves from -> to.
func countTransition(from, to string, n int) {
	if n > 0 {
		transitions.WithLabelValues(from, to).Add(float64(n))
	}
}

// Outcomes of an attempt, the outcome label of the task duration metric.
const (
	outcomeCompleted   = "completed"   // the handler returned nil
	outcomeFailed      = "failed"      // failed for good
	outcomeRetried     = "retried"     // failed with attempts left: back to ready
	outcomeInterrupted = "interrupted" // stopped by shutdown (parked or requeued)
	outcomeCancelled   = "cancelled"   // taken away: cancelled, or rescued by another worker
	outcomeLost        = "lost"        // this worker's heartbeat found its lease gone
)

// attemptOutcome names the outcome of an attempt that ends by writing
// item (zero when nothing is written: the task was taken away), its
// handler context's cause being cause.
func attemptOutcome(item store.TransitionItem, cause error) string {
	switch {
	case item.TaskID == 0 && errors.Is(cause, errLeaseLost):
		return outcomeLost
	case item.TaskID == 0:
		return outcomeCancelled
	case item.To == store.StatusCompleted:
		return outcomeCompleted
	case item.To == store.StatusFailed:
		return outcomeFailed
	case item.To == store.StatusInterrupted, errors.Is(cause, errShutdownCancel):
		return outcomeInterrupted
	}
	return outcomeRetried
}
