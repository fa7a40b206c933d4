package web

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// This file builds the breakdowns of the overview and queues pages (per
// workflow and per queue, over the last hour) and the list of what needs
// attention, shared by both pages and /api/overview.

const (
	// breakdownBucket is the width of a bucket of the breakdown charts.
	breakdownBucket = 5 * time.Minute
	// breakdownBuckets is how many buckets the last hour has (the last
	// one is the current, partial, one).
	breakdownBuckets = 12
	// deferGrowthSpan is how far back the deferred backlog of a queue is
	// compared with now.
	deferGrowthSpan = 15 * time.Minute
	// deferGrowthMin is how many more deferred tasks than deferGrowthSpan
	// ago make a growing backlog (and at least a tenth more).
	deferGrowthMin = 5
	// lateHeartbeat is the heartbeat age of a running worker that is
	// shown as late: three times the engine's default heartbeat interval.
	lateHeartbeat = 15 * time.Second
	// Size of a spark chart.
	sparkW, sparkH = 120, 28
)

// breakdownWindow is the last hour in 5-minute buckets aligned on the
// clock, the last bucket ending at now.
func breakdownWindow(now time.Time) store.BreakdownParams {
	since := now.UTC().Truncate(breakdownBucket).Add(-(breakdownBuckets - 1) * breakdownBucket)
	return store.BreakdownParams{Since: since, Until: now, Bucket: breakdownBucket, DeferSince: now.Add(-deferGrowthSpan)}
}

// breakdownData is one read of the breakdown, with its window.
type breakdownData struct {
	window store.BreakdownParams
	rows   []store.BreakdownRow
}

func (c *statsCache) oldestSnapshot(ctx context.Context) (store.Horizon, error) {
	now := c.clock()
	h, err := c.horizon.get(ctx, now, c.ttl, c.primary.Horizon)
	if err != nil {
		return h, err
	}
	return c.held.observe(h, now), nil
}

func (c *statsCache) taskBreakdown(ctx context.Context) (breakdownData, error) {
	return c.breakdown.get(ctx, c.clock(), c.ttl, func(ctx context.Context) (breakdownData, error) {
		w := breakdownWindow(c.clock())
		rows, err := c.st.TaskBreakdown(ctx, w)
		return breakdownData{window: w, rows: rows}, err
	})
}

// interruptedRunsUpTo caps the count of interrupted runs, which stays
// cheap on a big table.
const interruptedRunsUpTo = 10000

func (c *statsCache) interruptedRuns(ctx context.Context) (int, error) {
	return c.interrupted.get(ctx, c.clock(), c.ttl, func(ctx context.Context) (int, error) {
		return c.st.RunCountInterrupted(ctx, interruptedRunsUpTo)
	})
}

func (c *statsCache) unroutableList(ctx context.Context) ([]store.Unroutable, error) {
	return c.unroutable.get(ctx, c.clock(), c.ttl, c.st.UnroutableList)
}

// breakdownItem is a workflow's or queue's breakdown before rendering.
type breakdownItem struct {
	Kind      string                `json:"-"`
	Name      string                `json:"name"`
	States    map[string]int64      `json:"tasks_by_state"`
	Completed int64                 `json:"completed"`
	Failed    int64                 `json:"failed"`
	FailRate  *float64              `json:"failure_rate"`
	PerMinute float64               `json:"throughput_per_minute"`
	WaitP50   *float64              `json:"wait_p50_seconds"`
	WaitP95   *float64              `json:"wait_p95_seconds"`
	RunP50    *float64              `json:"run_p50_seconds"`
	RunP95    *float64              `json:"run_p95_seconds"`
	Buckets   []breakdownBucketJSON `json:"buckets"`
	Attention string                `json:"attention,omitempty"`
}

// breakdownBucketJSON is one 5-minute bucket of a breakdown.
type breakdownBucketJSON struct {
	Start     time.Time `json:"start"`
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"`
	Started   int64     `json:"started"`
	WaitP95   *float64  `json:"wait_p95_seconds"`
	RunP95    *float64  `json:"run_p95_seconds"`
}

// attentionJSON is an item of what needs attention.
type attentionJSON struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	Link    string `json:"link,omitempty"`
	weight  float64
}

// breakdownSet is what the overview, the queues page and the API show.
type breakdownSet struct {
	Workflows []*breakdownItem `json:"workflows"`
	Queues    []*breakdownItem `json:"queues"`
	Attention []attentionJSON  `json:"attention"`
}

// breakdowns reads (through the cache) and assembles the breakdowns and
// the attention list.
func (s *Server) breakdowns(ctx context.Context) (breakdownSet, error) {
	if err := s.cache.warm(ctx); err != nil {
		return breakdownSet{}, err
	}
	queues, err := s.cache.queueDepth(ctx)
	if err != nil {
		return breakdownSet{}, err
	}
	un, err := s.cache.unroutableList(ctx)
	if err != nil {
		return breakdownSet{}, err
	}
	return s.breakdownsOf(ctx, queues, un)
}

// breakdownsOf is breakdowns over queue rows and unroutable tasks the
// caller has read.
func (s *Server) breakdownsOf(ctx context.Context, queues []store.QueueDepth, un []store.Unroutable) (breakdownSet, error) {
	var set breakdownSet
	counts, err := s.cache.taskCounts(ctx)
	if err != nil {
		return set, err
	}
	bd, err := s.cache.taskBreakdown(ctx)
	if err != nil {
		return set, err
	}
	workers, err := s.cache.liveWorkers(ctx)
	if err != nil {
		return set, err
	}
	set = buildBreakdowns(counts, bd, queues, workers, un)
	// Runs are counted only while the task counts show interrupted tasks
	// (a run is interrupted exactly while one of its tasks is).
	interrupted := 0
	if slices.ContainsFunc(counts, func(c store.TaskCount) bool { return c.Status == store.StatusInterrupted && c.Tasks > 0 }) {
		if interrupted, err = s.cache.interruptedRuns(ctx); err != nil {
			return set, err
		}
	}
	set.Attention = withInterrupted(set.Attention, interrupted, counts)
	// The horizon is read from the primary: a site that reads from a
	// replica still shows the rest while the primary is out of reach.
	if h, err := s.cache.oldestSnapshot(ctx); err != nil {
		s.log.DebugContext(ctx, "read the vacuum horizon", slog.Any("error", err))
	} else {
		set.Attention = withHeldHorizon(set.Attention, h, s.heldHorizon)
	}
	return set, nil
}

// withHeldHorizon adds to the attention list what holds back vacuum (see
// the README, "Held snapshots"): a transaction or a connected
// replication slot once it has for heldFor or longer, an inactive slot
// at once (it holds the horizon until its consumer returns or it is
// dropped). The item comes after the late heartbeats and before growing
// deferred backlogs.
func withHeldHorizon(list []attentionJSON, h store.Horizon, heldFor time.Duration) []attentionJSON {
	if h.Xmin == "" || (h.For < heldFor && !h.Inactive) {
		return list
	}
	item := attentionJSON{Kind: "horizon", Subject: h.Kind + " " + h.Holder}
	switch {
	case h.Inactive:
		item.Text = fmt.Sprintf(": no standby or client is connected to it, and it holds back vacuum (xmin age %d) until one reconnects or the slot is dropped; dead row versions pile up in tasks and runs meanwhile", h.Age)
	case h.Kind == store.HorizonSlot:
		item.Text = fmt.Sprintf(": has held back vacuum for at least %s (xmin age %d), for a long query on its standby (hot_standby_feedback); dead row versions pile up in tasks and runs until it ends",
			h.For.Round(time.Second), h.Age)
	default:
		item.Text = fmt.Sprintf(": in a transaction for %s, holds back vacuum (xmin age %d); dead row versions pile up in tasks and runs until it ends",
			h.For.Round(time.Second), h.Age)
	}
	at := slices.IndexFunc(list, func(a attentionJSON) bool { return a.Kind == "deferred" })
	if at < 0 {
		at = len(list)
	}
	return slices.Insert(list, at, item)
}

// withInterrupted puts first on the attention list the runs parked
// interrupted (runs of interruptedRunsUpTo or more counted as that), with
// their interrupted tasks (from counts) and a link to them on the runs
// list: they wait for an admin to requeue or cancel them.
func withInterrupted(list []attentionJSON, runs int, counts []store.TaskCount) []attentionJSON {
	if runs == 0 {
		return list
	}
	var tasks int64
	for _, c := range counts {
		if c.Status == store.StatusInterrupted {
			tasks += c.Tasks
		}
	}
	n := plural(runs, "interrupted run")
	if runs >= interruptedRunsUpTo {
		n = strconv.Itoa(runs) + "+ interrupted runs"
	}
	item := attentionJSON{Kind: "interrupted", Subject: n, Link: "/runs?status=" + store.RunInterrupted,
		Text:   fmt.Sprintf(": %s parked until an admin requeues or cancels them (bulk action requeue)", plural(int(tasks), "task")),
		weight: float64(runs)}
	return slices.Insert(list, 0, item)
}

// holdClock times a holder of the horizon that has no transaction start
// (a replication slot): from when the site first saw it hold the same
// xmin, a lower bound.
type holdClock struct {
	mu    sync.Mutex
	key   string
	since time.Time
}

// observe returns h with For set from the clock, for a slot; other
// holders are returned as they are.
func (c *holdClock) observe(h store.Horizon, now time.Time) store.Horizon {
	if h.Kind != store.HorizonSlot {
		return h
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if key := h.Kind + "\x00" + h.Holder + "\x00" + h.Xmin; key != c.key {
		c.key, c.since = key, now
	}
	h.For = now.Sub(c.since)
	return h
}

// buildBreakdowns assembles the breakdowns and the attention list from
// what breakdowns read.
func buildBreakdowns(counts []store.TaskCount, bd breakdownData, queues []store.QueueDepth,
	workers []store.WorkerSlots, un []store.Unroutable) breakdownSet {
	var set breakdownSet
	items := map[[2]string]*breakdownItem{}
	item := func(kind, name string) *breakdownItem {
		k := [2]string{kind, name}
		if it, ok := items[k]; ok {
			return it
		}
		it := &breakdownItem{Kind: kind, Name: name, States: map[string]int64{}, Buckets: make([]breakdownBucketJSON, breakdownBuckets)}
		for i := range it.Buckets {
			it.Buckets[i].Start = bd.window.Since.Add(time.Duration(i) * breakdownBucket)
		}
		items[k] = it
		return it
	}
	for _, c := range counts {
		item(store.BreakdownWorkflow, c.Workflow).States[c.Status] += c.Tasks
		item(store.BreakdownQueue, c.Queue).States[c.Status] += c.Tasks
	}
	minutes := bd.window.Until.Sub(bd.window.Since).Minutes()
	for _, r := range bd.rows {
		it := item(r.Kind, r.Name)
		if r.Bucket < 0 {
			it.Completed, it.Failed = r.Completed, r.Failed
			it.WaitP50, it.WaitP95, it.RunP50, it.RunP95 = r.WaitP50, r.WaitP95, r.RunP50, r.RunP95
			if done := r.Completed + r.Failed; done > 0 {
				rate := float64(r.Failed) / float64(done)
				it.FailRate = &rate
				if minutes > 0 {
					it.PerMinute = float64(done) / minutes
				}
			}
			continue
		}
		if r.Bucket < len(it.Buckets) {
			b := &it.Buckets[r.Bucket]
			b.Completed, b.Failed, b.Started, b.WaitP95, b.RunP95 = r.Completed, r.Failed, r.Started, r.WaitP95, r.RunP95
		}
	}

	// Queues with ready work that no live worker can run.
	byQueue := unroutableByQueue(un)
	for _, q := range slices.Sorted(maps.Keys(byQueue)) {
		var ready int64
		var tasks []string
		for _, u := range byQueue[q] {
			ready += u.Ready
			tasks = append(tasks, u.Workflow+"."+u.Task)
			item(store.BreakdownWorkflow, u.Workflow).Attention = "no worker"
		}
		item(store.BreakdownQueue, q).Attention = "no worker"
		set.Attention = append(set.Attention, attentionJSON{Kind: "unroutable", Subject: "queue " + q, Link: "/queues",
			Text:   fmt.Sprintf(": %s no live worker can run (%s)", plural(int(ready), "ready task"), clip(strings.Join(tasks, ", "), 120)),
			weight: float64(ready)})
	}
	// Running workers whose heartbeat is late.
	for _, w := range workers {
		if w.Status == "running" && w.HeartbeatAge > lateHeartbeat.Seconds() {
			set.Attention = append(set.Attention, attentionJSON{Kind: "heartbeat", Subject: "worker #" + strconv.FormatInt(w.WorkerID, 10) + " " + w.Name,
				Link: "/workers", Text: ": last heartbeat " + fmtAge(w.HeartbeatAge), weight: w.HeartbeatAge})
		}
	}
	// Queues whose deferred backlog grew over deferGrowthSpan.
	for _, q := range queues {
		it := item(store.BreakdownQueue, q.Queue)
		var in, out int64
		for _, r := range bd.rows {
			if r.Kind == store.BreakdownQueue && r.Name == q.Queue && r.Bucket < 0 {
				in, out = r.DeferIn, r.DeferOut
			}
		}
		then := q.Deferred - (in - out)
		if grew := q.Deferred - then; grew >= deferGrowthMin && grew*10 >= then {
			if it.Attention == "" {
				it.Attention = "deferred growing"
			}
			set.Attention = append(set.Attention, attentionJSON{Kind: "deferred", Subject: "queue " + q.Queue, Link: "/queues",
				Text:   fmt.Sprintf(": %d deferred tasks, %d more than %d minutes ago", q.Deferred, grew, int(deferGrowthSpan.Minutes())),
				weight: float64(grew)})
		}
	}
	rank := map[string]int{"unroutable": 0, "heartbeat": 1, "deferred": 2}
	slices.SortStableFunc(set.Attention, func(a, b attentionJSON) int {
		return cmp.Or(cmp.Compare(rank[a.Kind], rank[b.Kind]), cmp.Compare(b.weight, a.weight), cmp.Compare(a.Subject, b.Subject))
	})

	for _, it := range items {
		if it.Kind == store.BreakdownWorkflow {
			set.Workflows = append(set.Workflows, it)
		} else {
			set.Queues = append(set.Queues, it)
		}
	}
	order := func(a, b *breakdownItem) int {
		// What needs attention first, then by name.
		return cmp.Or(cmp.Compare(boolRank(a.Attention == ""), boolRank(b.Attention == "")), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(set.Workflows, order)
	slices.SortFunc(set.Queues, order)
	set.Workflows, set.Queues, set.Attention = nonNil(set.Workflows), nonNil(set.Queues), nonNil(set.Attention)
	return set
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// breakdownViews renders breakdown items for the templates.
func breakdownViews(items []*breakdownItem) []templates.Breakdown {
	out := make([]templates.Breakdown, len(items))
	for i, it := range items {
		v := templates.Breakdown{
			Kind: it.Kind, Name: it.Name, Completed: it.Completed, Failed: it.Failed, Attention: it.Attention,
			FailRate: "–", Throughput: strconv.FormatFloat(it.PerMinute, 'f', 1, 64),
			WaitP50: fmtSeconds(it.WaitP50), WaitP95: fmtSeconds(it.WaitP95), RunP50: fmtSeconds(it.RunP50), RunP95: fmtSeconds(it.RunP95),
			Chart: sparkChart(it.Buckets),
		}
		if it.FailRate != nil {
			v.FailRate = strconv.FormatFloat(*it.FailRate*100, 'f', 1, 64) + "%"
		}
		if it.Kind == store.BreakdownWorkflow {
			v.Link = "/runs?workflow=" + url.QueryEscape(it.Name)
		} else {
			v.Link = "/queues"
		}
		for _, st := range taskStates {
			if n := it.States[st]; n > 0 {
				v.States = append(v.States, templates.StateCount{State: st, Count: n})
			}
		}
		out[i] = v
	}
	return out
}

func attentionViews(as []attentionJSON) []templates.Attention {
	out := make([]templates.Attention, len(as))
	for i, a := range as {
		out[i] = templates.Attention{Kind: a.Kind, Subject: a.Subject, Text: a.Text, Link: a.Link}
	}
	return out
}

// fmtSeconds renders a duration in seconds; "–" for none.
func fmtSeconds(s *float64) string {
	if s == nil {
		return "–"
	}
	return fmtDuration(time.Duration(*s * float64(time.Second)))
}

// sparkChart lays out the spark chart of a breakdown's buckets: one bar
// per bucket (completed, failed on top), scaled to the busiest bucket,
// and a line of the p95 run time scaled to its highest value. The
// overview and the queues page draw every chart with it.
func sparkChart(buckets []breakdownBucketJSON) templates.SparkChart {
	c := templates.SparkChart{Width: sparkW, Height: sparkH}
	if len(buckets) == 0 {
		return c
	}
	var top int64
	var topRun float64
	var done, failed int64
	for _, b := range buckets {
		top = max(top, b.Completed+b.Failed)
		done += b.Completed
		failed += b.Failed
		if b.RunP95 != nil {
			topRun = max(topRun, *b.RunP95)
		}
	}
	step := sparkW / len(buckets)
	w := max(step-1, 1)
	scale := func(v int64) int {
		if top == 0 || v == 0 {
			return 0
		}
		return max(int(v*int64(sparkH-2)/top), 1)
	}
	var pts []string
	for i, b := range buckets {
		bar := templates.SparkBar{X: i * step, W: w}
		bar.Title = fmt.Sprintf("%s: %d completed, %d failed, p95 run %s", b.Start.UTC().Format("15:04"), b.Completed, b.Failed, fmtSeconds(b.RunP95))
		bar.DoneH = scale(b.Completed)
		bar.DoneY = sparkH - bar.DoneH
		bar.FailH = scale(b.Failed)
		bar.FailY = bar.DoneY - bar.FailH
		c.Bars = append(c.Bars, bar)
		if b.RunP95 != nil && topRun > 0 {
			y := 1 + int((1-*b.RunP95/topRun)*float64(sparkH-2))
			pts = append(pts, strconv.Itoa(i*step+w/2)+","+strconv.Itoa(y))
		}
	}
	if len(pts) > 1 {
		c.Line = strings.Join(pts, " ")
	}
	c.Label = fmt.Sprintf("Last hour: %d completed, %d failed", done, failed)
	return c
}
