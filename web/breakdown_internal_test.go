package web

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestAttentionOrder: queues with work no worker can run come first, then
// late heartbeats (oldest first), then growing deferred
// backlogs; the rows that need attention sort to the top with a badge.
func TestAttentionOrder(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 10, 7, 0, 0, time.UTC)
	bd := breakdownData{window: breakdownWindow(now), rows: []store.BreakdownRow{
		{Kind: store.BreakdownQueue, Name: "bulk", Bucket: -1, DeferIn: 40, DeferOut: 10},   // 30 more: growing
		{Kind: store.BreakdownQueue, Name: "steady", Bucket: -1, DeferIn: 3, DeferOut: 1},   // 2 more: not enough
		{Kind: store.BreakdownQueue, Name: "mail", Bucket: -1, DeferIn: 100, DeferOut: 90},  // 10 more of 200: not a tenth
		{Kind: store.BreakdownWorkflow, Name: "alpha", Bucket: 11, Completed: 4, Failed: 1}, // current bucket
	}}
	queues := []store.QueueDepth{
		{Queue: "bulk", Deferred: 50}, {Queue: "steady", Deferred: 9}, {Queue: "mail", Deferred: 210}, {Queue: "zeta", Ready: 7},
	}
	workers := []store.WorkerSlots{
		{WorkerID: 1, Name: "ok", Status: "running", HeartbeatAge: 1},
		{WorkerID: 2, Name: "slow", Status: "running", HeartbeatAge: 20},
		{WorkerID: 3, Name: "slower", Status: "running", HeartbeatAge: 25},
		{WorkerID: 4, Name: "gone", Status: "stopped", HeartbeatAge: 999},
	}
	un := []store.Unroutable{
		{Queue: "zeta", Workflow: "omega", Task: "t", Ready: 7},
		{Queue: "bulk", Workflow: "alpha", Task: "x", Ready: 2},
	}
	counts := []store.TaskCount{
		{Workflow: "alpha", Queue: "bulk", Status: "deferred", Tasks: 50},
		{Workflow: "beta", Queue: "steady", Status: "completed", Tasks: 3},
		{Workflow: "omega", Queue: "zeta", Status: "ready", Tasks: 7},
	}
	set := buildBreakdowns(counts, bd, queues, workers, un)

	var got []string
	for _, a := range set.Attention {
		got = append(got, a.Kind+" "+a.Subject)
	}
	require.Equal(t, []string{
		"unroutable queue zeta", "unroutable queue bulk", // most ready first
		"heartbeat worker #3 slower", "heartbeat worker #2 slow", // latest heartbeat last
		"deferred queue bulk",
	}, got)
	require.Contains(t, set.Attention[4].Text, "50 deferred tasks, 30 more than 15 minutes ago")

	var qs []string
	for _, q := range set.Queues {
		qs = append(qs, q.Name+":"+q.Attention)
	}
	require.Equal(t, []string{"bulk:no worker", "zeta:no worker", "mail:", "steady:"}, qs)
	var wfs []string
	for _, w := range set.Workflows {
		wfs = append(wfs, w.Name+":"+w.Attention)
	}
	require.Equal(t, []string{"alpha:no worker", "omega:no worker", "beta:"}, wfs)
	require.Equal(t, int64(4), set.Workflows[0].Buckets[11].Completed, "the current bucket is the last")
	require.Equal(t, now.Add(-2*time.Minute), set.Workflows[0].Buckets[11].Start, "buckets are aligned on the clock")
}

// TestWithHeldHorizon: a transaction that has held the horizon for the
// threshold comes after the late heartbeats and before the growing
// deferred backlogs; a younger one, or none, adds nothing.
func TestWithHeldHorizon(t *testing.T) {
	list := []attentionJSON{{Kind: "unroutable"}, {Kind: "heartbeat"}, {Kind: "deferred"}}
	kinds := func(as []attentionJSON) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Kind)
		}
		return out
	}
	h := store.Horizon{Xmin: "812", Age: 42, Kind: "session", Holder: "pid 7 (psql, idle in transaction)", For: 3*time.Minute + 12*time.Second}
	got := withHeldHorizon(slices.Clone(list), h, time.Minute)
	require.Equal(t, []string{"unroutable", "heartbeat", "horizon", "deferred"}, kinds(got))
	require.Equal(t, "session pid 7 (psql, idle in transaction)", got[2].Subject)
	require.Equal(t, ": in a transaction for 3m12s, holds back vacuum (xmin age 42); dead row versions pile up in tasks and runs until it ends", got[2].Text)
	require.Equal(t, []string{"horizon"}, kinds(withHeldHorizon(nil, h, time.Minute)))

	h.For = 59 * time.Second
	require.Equal(t, kinds(list), kinds(withHeldHorizon(slices.Clone(list), h, time.Minute)))
	require.Equal(t, kinds(list), kinds(withHeldHorizon(slices.Clone(list), store.Horizon{}, 0)))

	// A slot whose standby is connected counts from when the site first
	// saw it; one nobody is connected to is shown at once.
	slot := store.Horizon{Xmin: "900", Age: 7, Kind: store.HorizonSlot, Holder: "standby_a", For: 59 * time.Second}
	require.Equal(t, kinds(list), kinds(withHeldHorizon(slices.Clone(list), slot, time.Minute)))
	slot.For = 2 * time.Minute
	got = withHeldHorizon(slices.Clone(list), slot, time.Minute)
	require.Equal(t, []string{"unroutable", "heartbeat", "horizon", "deferred"}, kinds(got))
	require.Equal(t, "replication slot standby_a", got[2].Subject)
	require.Equal(t, ": has held back vacuum for at least 2m0s (xmin age 7), for a long query on its standby (hot_standby_feedback); dead row versions pile up in tasks and runs until it ends", got[2].Text)
	slot.For, slot.Inactive = 0, true
	got = withHeldHorizon(slices.Clone(list), slot, time.Minute)
	require.Equal(t, []string{"unroutable", "heartbeat", "horizon", "deferred"}, kinds(got))
	require.Equal(t, ": no standby or client is connected to it, and it holds back vacuum (xmin age 7) until one reconnects or the slot is dropped; dead row versions pile up in tasks and runs meanwhile", got[2].Text)
}

// TestHoldClockTimesHoldersWithoutAStart: a slot's hold is timed from
// when the same xmin was first seen, and starts again when it moves; a
// transaction keeps its own duration.
func TestHoldClockTimesHoldersWithoutAStart(t *testing.T) {
	var c holdClock
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	slot := store.Horizon{Xmin: "900", Kind: store.HorizonSlot, Holder: "standby_a"}
	require.Zero(t, c.observe(slot, t0).For)
	require.Equal(t, 90*time.Second, c.observe(slot, t0.Add(90*time.Second)).For)
	slot.Xmin = "950" // the standby's query ended; another began
	require.Zero(t, c.observe(slot, t0.Add(100*time.Second)).For)
	require.Equal(t, 5*time.Second, c.observe(slot, t0.Add(105*time.Second)).For)

	tx := store.Horizon{Xmin: "960", Kind: "session", Holder: "pid 7", Since: t0, For: 3 * time.Minute}
	require.Equal(t, 3*time.Minute, c.observe(tx, t0.Add(time.Hour)).For)
	require.Equal(t, store.Horizon{}, c.observe(store.Horizon{}, t0))
}
