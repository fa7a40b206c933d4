package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// keyedTask is a run of one task, workflow.t (one insert takes one
// template per workflow), in queue, with input and
// the flow-control declarations given.
func keyedTask(workflow, queue, input string, conc, rate *store.FlowTemplate) store.RunInsertParams {
	return store.RunInsertParams{Workflow: workflow, Input: json.RawMessage(input), Queue: queue,
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "t", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{},
			Concurrency: conc, RateLimit: rate}}}
}

// insertRuns inserts ps and returns the id of each run's first task.
func insertRuns(t *testing.T, b bundle, ps ...store.RunInsertParams) []int64 {
	t.Helper()
	ctx := context.Background()
	ins, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	ids := make([]int64, len(ins))
	for i, r := range ins {
		tasks, err := b.st.TaskListByRun(ctx, r.ID)
		require.NoError(t, err)
		ids[i] = tasks[0].ID
	}
	return ids
}

func TestTaskWaitSaysWhyEachReadyTaskWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"paused", "orphan", "routed", "rq", "cq", "capq"}))
	// w serves every queue but orphan and routed, and runs any task;
	// routed's only worker runs mine.a.
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4, "paused": 4, "rq": 4, "cq": 4, "capq": 4})
	require.NoError(t, err)
	_, err = b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "w2", Queues: map[string]int{"routed": 1}, Handles: []string{"mine.a"}})
	require.NoError(t, err)
	claim := func(queue string, n int) []store.Claimed {
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{queue}, Limits: []int{n}, Lease: time.Hour, Keyed: true})
		require.NoError(t, err)
		return got
	}
	later := time.Now().Add(time.Hour)
	scheduled := oneTask("ws", "s", "default")
	scheduled.AvailableAt = &later
	rate := &store.FlowTemplate{Group: "api", Path: []string{"acct"}, Limit: 1, Per: time.Hour}
	conc := &store.FlowTemplate{Group: "stripe", Path: []string{"customer"}, Max: 1}

	ids := insertRuns(t, b,
		oneTask("wp", "p", "paused"),                                  // 0: queue paused (and run paused)
		oneTask("wr", "r", "orphan"),                                  // 1: run paused (and no worker)
		oneTask("wo", "o", "orphan"),                                  // 2: no worker serves orphan
		oneTask("other", "x", "routed"),                               // 3: no worker registers other.x
		scheduled,                                                     // 4: scheduled
		oneTask("wb", "b", "default"),                                 // 5: backoff
		keyedTask("rate", "rq", `{"acct": "acme"}`, nil, rate),        // 6: rate limited (claimed first)
		keyedTask("rate", "rq", `{"acct": "acme"}`, nil, rate),        // 7
		keyedTask("conc", "cq", `{"customer": "cust_42"}`, conc, nil), // 8: concurrency full (claimed first)
		keyedTask("conc", "cq", `{"customer": "cust_42"}`, conc, nil), // 9
		oneTask("cap", "c", "capq"),                                   // 10: queue at its cap (claimed first)
		oneTask("cap", "c", "capq"),                                   // 11
		oneTask("free", "f", "default"),                               // 12: waits for a slot
	)
	require.NoError(t, b.st.QueueSetPaused(ctx, "paused", true))
	for _, i := range []int{0, 1} {
		task, err := b.st.TaskGet(ctx, ids[i])
		require.NoError(t, err)
		_, _, err = b.st.RunSetPaused(ctx, task.RunID, true)
		require.NoError(t, err)
	}
	_, err = b.db.SQL.Exec(`UPDATE cairn.tasks SET attempt = 1, available_at = now() + interval '1 minute' WHERE id = $1`, ids[5])
	require.NoError(t, err)
	require.Len(t, claim("rq", 1), 1)
	require.Len(t, claim("cq", 5), 1)
	one := 1
	require.NoError(t, b.st.QueueSetCap(ctx, "capq", &one))
	require.Len(t, claim("capq", 1), 1)

	waits, err := b.st.TaskWaitList(ctx, ids)
	require.NoError(t, err)
	byID := map[int64]store.TaskWait{}
	for _, w := range waits {
		byID[w.TaskID] = w
	}
	require.Len(t, byID, 10, "the running tasks (6, 8, 10) are left out")
	for _, i := range []int{6, 8, 10} {
		require.NotContains(t, byID, ids[i])
	}
	runOf := func(i int) int64 {
		task, err := b.st.TaskGet(ctx, ids[i])
		require.NoError(t, err)
		return task.RunID
	}
	for _, c := range []struct {
		i      int
		reason store.WaitReason
		detail string
	}{
		{0, store.WaitQueuePaused, "queue paused is paused"},
		{1, store.WaitRunPaused, fmt.Sprintf("run %d is paused", runOf(1))},
		{2, store.WaitNoWorker, "no live worker serves queue orphan"},
		{3, store.WaitNoWorker, "no live worker registers other.x"},
		{4, store.WaitScheduled, "scheduled for "},
		{5, store.WaitBackoff, "retry backoff until "},
		{7, store.WaitRateLimited, "rate-limited until "},
		{9, store.WaitConcurrencyFull, "concurrency full: stripe · cust_42, 1/1 running"},
		{11, store.WaitQueueCap, "queue capq at its cap: 1/1 running"},
		{12, store.WaitSlot, "waiting for a free slot"},
	} {
		got := byID[ids[c.i]]
		require.Equal(t, c.reason, got.Reason, "task %d: %+v", c.i, got)
		require.Contains(t, got.Detail, c.detail, "task %d", c.i)
	}
	require.WithinDuration(t, later, *byID[ids[4]].Until, time.Second)
	require.Contains(t, byID[ids[5]].Detail, "(attempt 1 failed)")

	// The rate: one start per hour, taken by task 6; task 7 may start
	// when that start leaves the window.
	r := byID[ids[7]]
	require.Equal(t, "api", r.Group)
	require.Equal(t, "acme", r.KeyValue)
	require.Equal(t, 1, r.Limit)
	require.Equal(t, time.Hour.Milliseconds(), r.PerMs)
	require.Contains(t, r.Detail, "api · acme, rate 1/1h full")
	started, err := b.st.TaskGet(ctx, ids[6])
	require.NoError(t, err)
	require.WithinDuration(t, started.StartedAt.Add(time.Hour), *r.Until, time.Millisecond)
	// A claim holds it back: its available_at moves to that time, and it
	// still waits for the rate, not for a schedule.
	require.Empty(t, claim("rq", 1))
	held, err := b.st.TaskGet(ctx, ids[7])
	require.NoError(t, err)
	require.True(t, held.AvailableAt.After(time.Now()), "held back until the start frees")
	r2, err := b.st.TaskWaitGet(ctx, ids[7])
	require.NoError(t, err)
	require.Equal(t, store.WaitRateLimited, r2.Reason, r2.Detail)
	require.True(t, r2.Until.Equal(held.AvailableAt), "%s != %s", r2.Until, held.AvailableAt)

	c := byID[ids[9]]
	require.Equal(t, "stripe", c.Group)
	require.Equal(t, "cust_42", c.KeyValue)
	require.Equal(t, int64(1), c.Running)
	require.Equal(t, 1, c.Limit)

	// Once the blocker goes, the next reason shows: the queue resumed,
	// task 0's run is still paused.
	require.NoError(t, b.st.QueueSetPaused(ctx, "paused", false))
	w0, err := b.st.TaskWaitGet(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.WaitRunPaused, w0.Reason)

	// Not ready, or unknown: no wait.
	none, err := b.st.TaskWaitGet(ctx, ids[6])
	require.NoError(t, err)
	require.Nil(t, none)
	none, err = b.st.TaskWaitGet(ctx, 1<<40)
	require.NoError(t, err)
	require.Nil(t, none)
}

func TestFlowHoldListShowsKeysHoldingWorkBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"other"}))
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "stripe", Path: []string{"customer"}, Max: 2}
	tight := &store.FlowTemplate{Group: "api", Path: []string{"acct"}, Limit: 1, Per: time.Hour}
	loose := &store.FlowTemplate{Group: "api", Path: []string{"acct"}, Limit: 5, Per: time.Hour}
	c42 := func(queue string) store.RunInsertParams {
		return keyedTask("c", queue, `{"customer": "cust_42"}`, conc, nil)
	}
	c7 := keyedTask("c", "default", `{"customer": "cust_7"}`, conc, nil)
	acme := keyedTask("acme", "default", `{"acct": "acme"}`, nil, tight)
	beta := keyedTask("beta", "default", `{"acct": "beta"}`, nil, loose)

	// Every key has room for these: all start.
	insertRuns(t, b, c42("default"), c42("default"), acme, c7, beta)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Hour, Keyed: true})
	require.NoError(t, err)
	require.Len(t, claimed, 5)
	var acmeStart time.Time
	for _, c := range claimed {
		if c.RateKey != nil && *c.RateKey == store.FlowKey('r', "api", "acme") {
			row, err := b.st.TaskGet(ctx, c.ID) // a claim does not return started_at
			require.NoError(t, err)
			acmeStart = *row.StartedAt
		}
	}
	require.False(t, acmeStart.IsZero())
	// Then more of each: cust_42 (2/2 running) and acme (1 start an
	// hour, taken) hold theirs back; cust_7 (1/2) and beta (1/5) do not.
	insertRuns(t, b, c42("default"), c42("default"), c42("default"), acme, acme, acme, acme, c7, c7, beta, c42("other"))

	holds, held, err := b.st.FlowHoldList(ctx, 20)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"default": 2, "other": 1}, held)
	require.Len(t, holds["default"], 2)
	a, s := holds["default"][0], holds["default"][1]
	require.Equal(t, "rate", a.Kind, "most ready first")
	require.Equal(t, "api", a.Group)
	require.Equal(t, "acme", a.KeyValue)
	require.Equal(t, int64(4), a.Ready)
	require.Equal(t, 1, *a.RateLimit)
	require.Equal(t, int64(1), *a.StartsInWindow)
	require.WithinDuration(t, acmeStart.Add(time.Hour), *a.FreesAt, time.Millisecond)
	require.Regexp(t, `^api · acme: rate 1/1h full until [0-9: -]+, 4 ready$`, a.Detail)

	require.Equal(t, "concurrency", s.Kind)
	require.Equal(t, "stripe", s.Group)
	require.Equal(t, "cust_42", s.KeyValue)
	require.Equal(t, int64(3), s.Ready)
	require.Equal(t, int64(2), *s.Running)
	require.Equal(t, 2, *s.MaxRunning)
	require.Equal(t, "stripe · cust_42: 2/2 running, 3 ready", s.Detail)

	// The key holds the other queue's task too, counted there.
	require.Len(t, holds["other"], 1)
	require.Equal(t, "stripe · cust_42: 2/2 running, 1 ready", holds["other"][0].Detail)

	// Bounded per queue, most ready first; the total stays.
	holds, held, err = b.st.FlowHoldList(ctx, 1)
	require.NoError(t, err)
	require.Len(t, holds["default"], 1)
	require.Equal(t, "acme", holds["default"][0].KeyValue)
	require.Equal(t, int64(2), held["default"])

	// A key with room holds nothing: cust_42's running tasks finish.
	_, err = b.db.SQL.Exec(`UPDATE cairn.tasks SET status = 'completed', worker_id = NULL WHERE status = 'running' AND conc_key = $1`,
		store.FlowKey('c', "stripe", "cust_42"))
	require.NoError(t, err)
	holds, held, err = b.st.FlowHoldList(ctx, 20)
	require.NoError(t, err)
	require.Len(t, holds["default"], 1)
	require.Equal(t, "rate", holds["default"][0].Kind)
	require.Empty(t, holds["other"])
	require.Zero(t, held["other"])
}
