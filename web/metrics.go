package web

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnhq/cairn/store"
)

// statsTTL is how long aggregate reads (task counts, throughput, worker
// and queue lists) are reused: every open overview refreshes on events,
// and the counts scan the tasks table, so many viewers and Prometheus
// share one read per TTL.
const statsTTL = 2 * time.Second

// cached holds one value read at most once per TTL; concurrent callers
// wait for the read in flight and share its result.
type cached[T any] struct {
	mu  sync.Mutex
	at  time.Time
	ok  bool
	val T
}

func (c *cached[T]) get(ctx context.Context, now time.Time, ttl time.Duration, read func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && now.Sub(c.at) < ttl && !now.Before(c.at) {
		return c.val, nil
	}
	v, err := read(ctx)
	if err != nil {
		return v, err
	}
	c.val, c.at, c.ok = v, now, true
	return v, nil
}

// statsCache caches the aggregate reads of the overview and /metrics.
type statsCache struct {
	st      Reads
	primary Reads // the horizon is the primary's, never a replica's
	clock   func() time.Time
	ttl     time.Duration

	counts     cached[[]store.TaskCount]
	throughput cached[[]store.ThroughputBucket]
	workers    cached[[]store.WorkerSlots]
	queues     cached[[]store.QueueDepth]
	// breakdown and unroutable feed the breakdowns (see breakdown.go).
	breakdown  cached[breakdownData]
	unroutable cached[[]store.Unroutable]
	horizon    cached[store.Horizon]
	// interrupted counts the interrupted runs (see withInterrupted).
	interrupted cached[int]
	held        holdClock // how long a slot has held the horizon
}

// together runs independent reads at once, each on a connection of its
// own, and returns the first error: a page's reads then cost the slowest
// of them, not their sum.
func together(ctx context.Context, reads ...func(context.Context) error) error {
	errs := make([]error, len(reads))
	var wg sync.WaitGroup
	for i, read := range reads {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = read(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// warm fills the cache entries the overview and the breakdowns read, at
// once (see together); the reads that follow are served from it.
func (c *statsCache) warm(ctx context.Context) error {
	return together(ctx,
		func(ctx context.Context) error { _, err := c.taskCounts(ctx); return err },
		func(ctx context.Context) error { _, err := c.throughputHour(ctx); return err },
		func(ctx context.Context) error { _, err := c.liveWorkers(ctx); return err },
		func(ctx context.Context) error { _, err := c.queueDepth(ctx); return err },
		func(ctx context.Context) error { _, err := c.taskBreakdown(ctx); return err },
		func(ctx context.Context) error { _, err := c.unroutableList(ctx); return err },
		func(ctx context.Context) error { _, err := c.interruptedRuns(ctx); return err },
		func(ctx context.Context) error { _, _ = c.oldestSnapshot(ctx); return nil }) // optional, see breakdownsOf
}

func (c *statsCache) taskCounts(ctx context.Context) ([]store.TaskCount, error) {
	return c.counts.get(ctx, c.clock(), c.ttl, c.st.TaskCountsByState)
}

func (c *statsCache) throughputHour(ctx context.Context) ([]store.ThroughputBucket, error) {
	return c.throughput.get(ctx, c.clock(), c.ttl, func(ctx context.Context) ([]store.ThroughputBucket, error) {
		since, until := throughputWindow(c.clock())
		return c.st.ThroughputPerMinute(ctx, since, until)
	})
}

// overviewWorkers is how many workers the overview lists.
const overviewWorkers = 20

func (c *statsCache) liveWorkers(ctx context.Context) ([]store.WorkerSlots, error) {
	return c.workers.get(ctx, c.clock(), c.ttl, func(ctx context.Context) ([]store.WorkerSlots, error) {
		return c.st.WorkerSlotList(ctx, overviewWorkers+1)
	})
}

func (c *statsCache) queueDepth(ctx context.Context) ([]store.QueueDepth, error) {
	return c.queues.get(ctx, c.clock(), c.ttl, c.st.QueueDepthList)
}

var tasksDesc = prometheus.NewDesc("cairn_tasks",
	"Tasks by state and queue, read from the cairn_task_counts view at scrape time.",
	[]string{"state", "queue"}, nil)

// taskCollector reports cairn_tasks{state,queue}. Every state of every
// queue that has tasks is reported, zeros included, so series do not
// vanish when a state empties.
type taskCollector struct {
	cache *statsCache
	log   *slog.Logger
}

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tasksDesc }

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, err := c.cache.taskCounts(ctx)
	if err != nil {
		c.log.WarnContext(ctx, "metrics: count tasks", slog.String("error", err.Error()))
		ch <- prometheus.NewInvalidMetric(tasksDesc, err)
		return
	}
	byQueue := map[string]map[string]int64{}
	for _, tc := range counts {
		m := byQueue[tc.Queue]
		if m == nil {
			m = map[string]int64{}
			byQueue[tc.Queue] = m
		}
		m[tc.Status] += tc.Tasks
	}
	for q, m := range byQueue {
		for _, state := range taskStates {
			ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(m[state]), state, q)
		}
	}
}

// metricsHandler serves the default registry (the engine's metrics, Go
// and process metrics) together with the site's own registry.
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{prometheus.DefaultGatherer, s.registry},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// stateCounts sums task counts per state, in display order, and the total.
func stateCounts(counts []store.TaskCount) ([]store.TaskCount, int64) {
	by := map[string]int64{}
	var total int64
	for _, c := range counts {
		by[c.Status] += c.Tasks
		total += c.Tasks
	}
	out := make([]store.TaskCount, 0, len(taskStates))
	for _, st := range taskStates {
		out = append(out, store.TaskCount{Status: st, Tasks: by[st]})
	}
	for st, n := range by { // states this version does not know
		if !slices.Contains(taskStates, st) {
			out = append(out, store.TaskCount{Status: st, Tasks: n})
		}
	}
	return out, total
}
