package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file says why ready work waits: per task (TaskWaitList, for the
// task page) and per queue (FlowHoldList, the flow keys that hold work
// back, for the queues page).

// WaitReason says why a ready task is not running yet.
type WaitReason string

// Why a ready task waits, in order of precedence: the first that holds
// is the one reported.
const (
	// WaitQueuePaused: its queue is paused.
	WaitQueuePaused WaitReason = "queue_paused"
	// WaitRunPaused: its run is paused.
	WaitRunPaused WaitReason = "run_paused"
	// WaitNoWorker: no live worker serves its queue and registers its
	// workflow and task (the rule of cairn_unroutable).
	WaitNoWorker WaitReason = "no_worker"
	// WaitNoVersion: no live worker that runs its task serves the version
	// its run was created with (a rolling deploy: see Task.Version).
	WaitNoVersion WaitReason = "no_version"
	// WaitScheduled: its available_at, set at enqueue, is in the future.
	WaitScheduled WaitReason = "scheduled"
	// WaitBackoff: it failed an attempt and waits out the retry delay.
	WaitBackoff WaitReason = "backoff"
	// WaitRateLimited: its rate key's window is full until Until.
	WaitRateLimited WaitReason = "rate_limited"
	// WaitConcurrencyFull: its concurrency key has Max tasks running.
	WaitConcurrencyFull WaitReason = "concurrency_full"
	// WaitQueueCap: its queue has as many tasks running as its cap.
	WaitQueueCap WaitReason = "queue_cap"
	// WaitSlot: nothing holds it back: it waits for a worker's free slot
	// (or its turn among the queue's ready tasks).
	WaitSlot WaitReason = "slot"
)

// TaskWait says why a ready task is not running yet.
type TaskWait struct {
	TaskID int64      `json:"task_id"`
	Reason WaitReason `json:"reason"`
	// Detail says it in words, e.g. "concurrency full: stripe · cust_42,
	// 2/2 running".
	Detail string `json:"detail"`
	// Until is when the wait ends by itself (scheduled, backoff, rate
	// limited), by the database clock.
	Until *time.Time `json:"until,omitempty"`
	// Group and KeyValue name the flow key that holds it (rate limited,
	// concurrency full).
	Group    string `json:"group,omitempty"`
	KeyValue string `json:"key_value,omitempty"`
	// Running and Limit are the counts behind concurrency_full
	// (running/max) and queue_cap (running/cap); Limit and PerMs the rate
	// limit behind rate_limited.
	Running int64 `json:"running,omitempty"`
	Limit   int   `json:"limit,omitempty"`
	PerMs   int64 `json:"per_ms,omitempty"`
}

// taskWaitFacts is what TaskWaitList reads of one ready task.
type taskWaitFacts struct {
	ID           int64     `bun:"id"`
	RunID        int64     `bun:"run_id"`
	Queue        string    `bun:"queue"`
	Workflow     string    `bun:"workflow"`
	Name         string    `bun:"name"`
	Version      *string   `bun:"version"`
	Attempt      int       `bun:"attempt"`
	AvailableAt  time.Time `bun:"available_at"`
	ConcKey      *string   `bun:"conc_key"`
	RateKey      *string   `bun:"rate_key"`
	Now          time.Time `bun:"now"`
	QueuePaused  bool      `bun:"queue_paused"`
	QueueCap     *int      `bun:"queue_cap"`
	QueueRunning int64     `bun:"queue_running"`
	RunPaused    bool      `bun:"run_paused"`
	Served       bool      `bun:"served"`
	Routable     bool      `bun:"routable"`
	Versioned    bool      `bun:"versioned"`
	ConcMax      *int      `bun:"conc_max"`
	ConcRunning  int64     `bun:"conc_running"`
	// ConcReturning counts the key's parked tasks waiting to come back,
	// whose places claims keep (see migration 028).
	ConcReturning int64      `bun:"conc_returning"`
	RateLimit     *int       `bun:"rate_limit"`
	RatePerMs     *int64     `bun:"rate_per_ms"`
	RateStarts    int64      `bun:"rate_starts"`
	RateFreesAt   *time.Time `bun:"rate_frees_at"`
}

// TaskWaitList says, for each task of ids that is ready, why it is not
// running yet (tasks in other states, and unknown ids, are left out), by
// task id. Its cost is a few index lookups per task: its run, queue and
// flow-key rows by primary key, its concurrency key's running tasks
// (tasks_conc_running) and, for a capped queue, the queue's running
// tasks.
func (s *Store) TaskWaitList(ctx context.Context, ids []int64) ([]TaskWait, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var facts []taskWaitFacts
	err := s.raw(`
SELECT t.id, t.run_id, t.queue, t.workflow, t.name, t.version, t.attempt, t.available_at, t.conc_key, t.rate_key, now() AS now,
	coalesce(q.paused, false) AS queue_paused, q.max_running AS queue_cap,
	CASE WHEN q.max_running IS NOT NULL
		THEN (SELECT count(*) FROM ?schema.tasks x WHERE x.queue = t.queue AND x.status = 'running') ELSE 0 END AS queue_running,
	r.paused AS run_paused,
	EXISTS (SELECT 1 FROM ?schema.workers w WHERE w.status = 'running' AND (w.queues -> t.queue) IS NOT NULL) AS served,
	EXISTS (SELECT 1 FROM ?schema.workers w WHERE w.status = 'running' AND (w.queues -> t.queue) IS NOT NULL
		AND (w.handles IS NULL OR t.workflow || '.' || t.name = ANY(w.handles))) AS routable,
	EXISTS (SELECT 1 FROM ?schema.workers w WHERE w.status = 'running' AND (w.queues -> t.queue) IS NOT NULL
		AND (w.handles IS NULL OR t.workflow || '.' || t.name = ANY(w.handles))
		AND (t.version IS NULL OR w.versions IS NULL OR t.workflow || '@' || t.version = ANY(w.versions))) AS versioned,
	cf.max_running AS conc_max,
	CASE WHEN cf.key IS NOT NULL
		THEN (SELECT count(*) FROM ?schema.tasks x WHERE x.conc_key = cf.key AND x.status = 'running') ELSE 0 END AS conc_running,
	CASE WHEN cf.key IS NOT NULL
		THEN (SELECT count(*) FROM ?schema.tasks x WHERE x.conc_key = cf.key AND x.status = 'deferred'
			AND x.resume_wanted_at > now() - interval '5 seconds') ELSE 0 END AS conc_returning,
	rf.rate_limit, rf.rate_per_ms, coalesce(rw.n, 0) AS rate_starts,
	rw.first + rf.rate_per_ms * interval '1 millisecond' AS rate_frees_at
FROM ?schema.tasks t
JOIN ?schema.run_rows r ON r.id = t.run_id
LEFT JOIN ?schema.queues q ON q.name = t.queue
LEFT JOIN ?schema.flow_keys cf ON cf.key = t.conc_key
LEFT JOIN ?schema.flow_keys rf ON rf.key = t.rate_key
LEFT JOIN LATERAL (
	SELECT count(*) AS n, min(s) AS first FROM unnest(rf.starts) s
	WHERE s > now() - rf.rate_per_ms * interval '1 millisecond'
) rw ON rf.key IS NOT NULL
WHERE t.id = ANY(?::bigint[]) AND t.status = 'ready'
ORDER BY t.id`, array(ids)).Scan(ctx, &facts)
	if err != nil {
		return nil, fmt.Errorf("read why tasks wait: %w", err)
	}
	out := make([]TaskWait, len(facts))
	for i, f := range facts {
		out[i] = f.wait()
	}
	return out, nil
}

// TaskWaitGet says why a ready task is not running yet; nil when the
// task is not ready (or does not exist).
func (s *Store) TaskWaitGet(ctx context.Context, id int64) (*TaskWait, error) {
	ws, err := s.TaskWaitList(ctx, []int64{id})
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	return &ws[0], nil
}

// wait applies the precedence of the wait reasons to the facts.
func (f *taskWaitFacts) wait() TaskWait {
	w := TaskWait{TaskID: f.ID}
	set := func(r WaitReason, format string, args ...any) TaskWait {
		w.Reason, w.Detail = r, fmt.Sprintf(format, args...)
		return w
	}
	rateFull := f.RateLimit != nil && f.RateStarts >= int64(*f.RateLimit) && f.RateFreesAt != nil
	rate := func(until time.Time) TaskWait {
		w.Until, w.Limit, w.PerMs = &until, *f.RateLimit, *f.RatePerMs
		w.Group, w.KeyValue = SplitFlowKey(*f.RateKey)
		return set(WaitRateLimited, "rate-limited until %s: %s, rate %d/%s full", fmtWhen(until, f.Now),
			FlowKeyLabel(*f.RateKey), *f.RateLimit, fmtPer(*f.RatePerMs))
	}
	task := f.Workflow + "." + f.Name
	switch {
	case f.QueuePaused:
		return set(WaitQueuePaused, "queue %s is paused", f.Queue)
	case f.RunPaused:
		return set(WaitRunPaused, "run %d is paused", f.RunID)
	case !f.Served:
		return set(WaitNoWorker, "no live worker serves queue %s", f.Queue)
	case !f.Routable:
		return set(WaitNoWorker, "no live worker registers %s", task)
	case !f.Versioned:
		return set(WaitNoVersion, "no live worker serves version %s of workflow %s", *f.Version, f.Workflow)
	case f.AvailableAt.After(f.Now):
		// A rate key's held-back task has its available_at moved to when
		// a start frees (see the keyed claim, sql/claim_keyed.sql): while the window stays full
		// until then, the rate is what it waits for.
		if rateFull && !f.RateFreesAt.Before(f.AvailableAt) {
			return rate(*f.RateFreesAt)
		}
		until := f.AvailableAt
		w.Until = &until
		if f.Attempt > 0 {
			return set(WaitBackoff, "retry backoff until %s (attempt %d failed)", fmtWhen(until, f.Now), f.Attempt)
		}
		return set(WaitScheduled, "scheduled for %s", fmtWhen(until, f.Now))
	case rateFull:
		return rate(*f.RateFreesAt)
	case f.ConcMax != nil && f.ConcRunning+f.ConcReturning >= int64(*f.ConcMax):
		w.Group, w.KeyValue = SplitFlowKey(*f.ConcKey)
		w.Running, w.Limit = f.ConcRunning, *f.ConcMax
		if f.ConcReturning > 0 {
			return set(WaitConcurrencyFull, "concurrency full: %s, %d/%d running, %d place(s) kept for parked tasks coming back",
				FlowKeyLabel(*f.ConcKey), f.ConcRunning, *f.ConcMax, f.ConcReturning)
		}
		return set(WaitConcurrencyFull, "concurrency full: %s, %d/%d running", FlowKeyLabel(*f.ConcKey), f.ConcRunning, *f.ConcMax)
	case f.QueueCap != nil && f.QueueRunning >= int64(*f.QueueCap):
		w.Running, w.Limit = f.QueueRunning, *f.QueueCap
		return set(WaitQueueCap, "queue %s at its cap: %d/%d running", f.Queue, f.QueueRunning, *f.QueueCap)
	}
	return set(WaitSlot, "waiting for a free slot")
}

// FlowHold is a flow key that holds ready tasks of a queue back: a
// concurrency key at its limit, or a rate key whose window is full.
type FlowHold struct {
	Queue string `bun:"queue" json:"queue"`
	// Kind is "concurrency" or "rate".
	Kind     string `bun:"-" json:"kind"`
	Group    string `bun:"-" json:"group"`
	KeyValue string `bun:"-" json:"key_value"`
	Key      string `bun:"key" json:"-"`
	// MaxRunning and Running: a concurrency key's limit and running
	// tasks (of every queue).
	MaxRunning *int   `bun:"max_running" json:"max_running,omitempty"`
	Running    *int64 `bun:"running" json:"running,omitempty"`
	// RateLimit starts per RatePerMs: a rate key's limit; StartsInWindow
	// its starts in the current window, FreesAt when the oldest leaves it.
	RateLimit      *int       `bun:"rate_limit" json:"rate_limit,omitempty"`
	RatePerMs      *int64     `bun:"rate_per_ms" json:"rate_per_ms,omitempty"`
	StartsInWindow *int64     `bun:"starts_in_window" json:"starts_in_window,omitempty"`
	FreesAt        *time.Time `bun:"frees_at" json:"frees_at,omitempty"`
	// Ready is how many of the queue's ready tasks the key holds, counted
	// up to FlowHoldReadyCap (ReadyCapped: there are more).
	Ready       int64 `bun:"ready" json:"ready"`
	ReadyCapped bool  `bun:"-" json:"ready_capped"`
	// Detail says it in words, e.g. "stripe · cust_42: 2/2 running, 130
	// ready".
	Detail string `bun:"-" json:"detail"`
	// Held is how many keys hold the queue's work back in all (the list
	// keeps the first few).
	Held int64     `bun:"held" json:"-"`
	Now  time.Time `bun:"now" json:"-"`
}

// FlowHoldReadyCap caps the ready tasks FlowHoldList counts per key.
const FlowHoldReadyCap = 10000

// FlowHoldList returns, per queue, up to perQueue flow keys that hold
// ready tasks back (most ready first), and how many keys do in all per
// queue. Only tasks whose round-robin key (fair_key: the concurrency key,
// else the rate key) is the key count as held by it: a rate key shared
// by tasks that also have a concurrency key shows under neither.
//
// Its cost: the concurrency keys come from the running keyed tasks
// (tasks_conc_running, a few per slot), the rate keys from a read of the
// flow_keys rows with a rate limit; each candidate's ready tasks are
// counted per queue through tasks_claim_keyed, up to FlowHoldReadyCap.
// It runs in a transaction of its own (the store's, when bound to one)
// with JIT compilation off.
func (s *Store) FlowHoldList(ctx context.Context, perQueue int) (map[string][]FlowHold, map[string]int64, error) {
	var rows []FlowHold
	// The planner prices the per-key counts far above what they cost (a
	// few index tuples per key and queue) and would JIT-compile the
	// statement, which takes longer than running it.
	err := s.scanWithoutJIT(ctx, &rows, `
WITH cand AS (
	-- Concurrency keys at their limit.
	SELECT f.key, f.max_running, c.running, NULL::int AS rate_limit, NULL::bigint AS rate_per_ms,
		NULL::bigint AS starts_in_window, NULL::timestamptz AS frees_at
	FROM (
		SELECT conc_key AS key, count(*) AS running FROM ?schema.tasks
		WHERE status = 'running' AND conc_key IS NOT NULL GROUP BY conc_key
	) c JOIN ?schema.flow_keys f ON f.key = c.key
	WHERE c.running >= f.max_running
	UNION ALL
	-- Rate keys whose window is full (a start within the window wrote
	-- updated_at).
	SELECT f.key, NULL, NULL, f.rate_limit, f.rate_per_ms, w.n, w.first + f.rate_per_ms * interval '1 millisecond'
	FROM ?schema.flow_keys f
	CROSS JOIN LATERAL (
		SELECT count(*) AS n, min(s) AS first FROM unnest(f.starts) s
		WHERE s > now() - f.rate_per_ms * interval '1 millisecond'
	) w
	WHERE f.rate_limit IS NOT NULL AND f.updated_at > now() - f.rate_per_ms * interval '1 millisecond'
		AND w.n >= f.rate_limit
), held AS (
	SELECT q.name AS queue, c.*, r.ready
	FROM cand c CROSS JOIN ?schema.queues q
	CROSS JOIN LATERAL (
		SELECT count(*) AS ready FROM (
			SELECT 1 FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.fair_key = c.key
			LIMIT ?
		) x
	) r
	WHERE r.ready > 0
)
SELECT x.queue, x.key, x.max_running, x.running, x.rate_limit, x.rate_per_ms, x.starts_in_window, x.frees_at,
	x.ready, x.held, x.now
FROM (
	SELECT h.*, count(*) OVER (PARTITION BY h.queue) AS held, now() AS now,
		row_number() OVER (PARTITION BY h.queue ORDER BY h.ready DESC, h.key) AS pos
	FROM held h
) x
WHERE x.pos <= ?
ORDER BY x.queue, x.pos`, FlowHoldReadyCap+1, perQueue)
	if err != nil {
		return nil, nil, fmt.Errorf("list flow keys holding work back: %w", err)
	}
	out, held := map[string][]FlowHold{}, map[string]int64{}
	for _, h := range rows {
		h.Group, h.KeyValue = SplitFlowKey(h.Key)
		if h.Ready > FlowHoldReadyCap {
			h.Ready, h.ReadyCapped = FlowHoldReadyCap, true
		}
		ready := fmtCount(h.Ready) + " ready"
		if h.ReadyCapped {
			ready = fmtCount(h.Ready) + "+ ready"
		}
		if h.MaxRunning != nil {
			h.Kind = "concurrency"
			h.Detail = fmt.Sprintf("%s: %d/%d running, %s", FlowKeyLabel(h.Key), deref64(h.Running), *h.MaxRunning, ready)
		} else {
			h.Kind = "rate"
			h.Detail = fmt.Sprintf("%s: rate %d/%s full", FlowKeyLabel(h.Key), *h.RateLimit, fmtPer(*h.RatePerMs))
			if h.FreesAt != nil {
				h.Detail += " until " + fmtWhen(*h.FreesAt, h.Now)
			}
			h.Detail += ", " + ready
		}
		out[h.Queue] = append(out[h.Queue], h)
		held[h.Queue] = h.Held
	}
	return out, held, nil
}

func deref64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// FlowKeyLabel renders a stored flow key as "group · value" ("group" for
// a key without a value).
func FlowKeyLabel(key string) string {
	g, v := SplitFlowKey(key)
	if v == "" {
		return g
	}
	return g + " · " + v
}

// fmtPer renders a rate window compactly: "1m", "1h30m", "1.5s".
func fmtPer(ms int64) string {
	s := (time.Duration(ms) * time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtWhen renders a time in UTC: the time of day when it is on now's
// day, with the date otherwise.
func fmtWhen(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

// fmtCount renders a count with thousands separators: "4,000".
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
