package engine

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Process-wide metrics, registered with the default Prometheus registry
// (the server's /metrics serves them).
var (
	transitions = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: "cairn", Name: "task_transitions_total",
		Help: "Task transitions committed by this process's workers, by from and to state.",
	}, []string{"from", "to"})
	claimLatency = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "claim_duration_seconds",
		Help:    "Time of one claim statement.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	taskDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cairn", Name: "task_duration_seconds",
		Help:    "Duration of task attempts, by workflow, task and outcome state.",
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
)
