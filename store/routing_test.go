package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// oneTask is a run of one task, workflow.name, in queue.
func oneTask(workflow, name, queue string) store.RunInsertParams {
	return store.RunInsertParams{Workflow: workflow, Input: json.RawMessage(`{}`), Queue: queue,
		Tasks: []store.TaskTemplate{{Idx: 0, Name: name, MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
}

// readyUntouched counts the ready tasks of workflow that no claim touched.
func readyUntouched(t *testing.T, b bundle, workflow string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE workflow = $1 AND status = 'ready' AND attempt = 0 AND worker_id IS NULL`,
		workflow).Scan(&n))
	return n
}

func TestClaimTakesOnlyTasksTheWorkerHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// The tasks nobody here handles come first in claim order: every claim
	// has to pass them.
	var ps []store.RunInsertParams
	for range 5 {
		ps = append(ps, oneTask("other", "x", "default"))
	}
	for range 12 {
		ps = append(ps, oneTask("mine", "a", "default"))
	}
	_, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	w, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "w", Queues: map[string]int{"default": 10},
		Handles: []string{"mine.a", "other.y"}})
	require.NoError(t, err)

	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{4}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 4)

	// The one-statement finish-and-claim hands two slots on.
	items := []store.TransitionItem{}
	for _, c := range claimed[:2] {
		items = append(items, store.TransitionItem{TaskID: c.ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: c.Attempt})
	}
	_, more, err := b.st.TaskFinishAndClaimOne(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items},
		store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 2)
	claimed = append(claimed, more...)

	// Parking hands two slots on.
	items = items[:0]
	for _, c := range claimed[2:4] {
		items = append(items, store.TransitionItem{TaskID: c.ID, To: store.StatusDeferred, Attempt: c.Attempt})
	}
	_, more, err = b.st.TaskDeferAndClaim(ctx, store.TaskDeferClaimParams{
		Park:   store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items},
		Queues: []string{"default"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 2)
	claimed = append(claimed, more...)

	// The transaction's finish-and-claim and the capped claim.
	_, _, more, err = b.st.TaskFinishAndClaim(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: claimed[4].ID, To: store.StatusCompleted, Attempt: claimed[4].Attempt}}},
		store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 1)
	claimed = append(claimed, more...)
	capped := 100
	require.NoError(t, b.st.QueueSetCap(ctx, "default", &capped))
	more, err = b.st.TaskClaimCapped(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
	require.NoError(t, err)
	claimed = append(claimed, more...)

	for _, c := range claimed {
		require.Equal(t, "mine.a", c.Workflow+"."+c.Name, "claimed a task the worker does not handle")
	}
	require.Len(t, claimed, 12, "every task the worker handles, and no other")
	require.Equal(t, 5, readyUntouched(t, b, "other"), "the others stay ready, no attempt spent")

	// Once the worker handles them, it claims them.
	require.NoError(t, b.st.WorkerSetHandles(ctx, w, []string{"mine.a", "other.x"}))
	more, err = b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 5)
	require.Zero(t, readyUntouched(t, b, "other"))
}

func TestClaimHandlesNoneOrAny(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{oneTask("a", "x", "default"), oneTask("b", "y", "default")})
	require.NoError(t, err)
	claim := func(w int64) []store.Claimed {
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
		require.NoError(t, err)
		return got
	}

	none, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "none", Queues: map[string]int{"default": 10}})
	require.NoError(t, err)
	require.Empty(t, claim(none), "a worker that registered nothing claims nothing")
	require.NoError(t, b.st.WorkerSetHandles(ctx, none, nil))
	require.Empty(t, claim(none), "nil handles are none, not any")
	ws, err := b.st.WorkerList(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, []string{}, ws[0].Handles, "an empty array, not NULL")

	// A worker row written without routing (a tool, an older build)
	// claims any task.
	anyw, err := b.st.WorkerInsert(ctx, "any", map[string]int{"default": 10})
	require.NoError(t, err)
	require.Len(t, claim(anyw), 2)

	require.ErrorIs(t, b.st.WorkerSetHandles(ctx, 1<<40, []string{"a.x"}), store.ErrNotFound)
}

func TestUnroutableListsReadyTasksNoLiveWorkerRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"etl"}))
	var ps []store.RunInsertParams
	for range 3 {
		etl := oneTask("etl", "extract", "etl")
		etl.Tasks = append(etl.Tasks, store.TaskTemplate{Idx: 1, Name: "load", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}})
		ps = append(ps, etl, oneTask("mail", "send", "default"))
	}
	_, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	list := func() []store.Unroutable {
		got, err := b.st.UnroutableList(ctx)
		require.NoError(t, err)
		for i := range got {
			got[i].OldestReadyAt = time.Time{}
		}
		return got
	}
	// No worker: nothing can run.
	require.Equal(t, []store.Unroutable{
		{Queue: "default", Workflow: "mail", Task: "send", Ready: 3, Available: 3},
		{Queue: "etl", Workflow: "etl", Task: "extract", Ready: 3, Available: 3},
		{Queue: "etl", Workflow: "etl", Task: "load", Ready: 3, Available: 3},
	}, list())

	// A live worker of etl registering etl.extract; a stopped one and one
	// of another queue registering etl.load do not count.
	_, err = b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "live", Queues: map[string]int{"etl": 1, "default": 1},
		Handles: []string{"etl.extract", "mail.send"}})
	require.NoError(t, err)
	stopped, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "stopped", Queues: map[string]int{"etl": 1}, Handles: []string{"etl.load"}})
	require.NoError(t, err)
	require.NoError(t, b.st.WorkerSetStatus(ctx, stopped, "stopped"))
	_, err = b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "elsewhere", Queues: map[string]int{"default": 1}, Handles: []string{"etl.load"}})
	require.NoError(t, err)
	require.Equal(t, []store.Unroutable{{Queue: "etl", Workflow: "etl", Task: "load", Ready: 3, Available: 3}}, list())

	// A worker without routing can claim anything of its queues.
	_, err = b.st.WorkerInsert(ctx, "any", map[string]int{"etl": 1})
	require.NoError(t, err)
	require.Empty(t, list())
}

func TestClaimReadsTheWorkersHandlesOncePerQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ps []store.RunInsertParams
	for range 200 {
		ps = append(ps, oneTask("other", "x", "default"))
	}
	for range 20 {
		ps = append(ps, oneTask("mine", "a", "default"))
	}
	_, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	w, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "w", Queues: map[string]int{"default": 10}, Handles: []string{"mine.a"}})
	require.NoError(t, err)
	plan := explainLines(t, b, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+b.st.ClaimQuery(8),
		"{default}", "{8}", "{-2147483648}", "{0}", w, w, 60000, b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel(), false)
	text := strings.Join(plan, "\n")
	var scans int
	for _, line := range plan {
		if strings.Contains(line, " on workers ") {
			scans++
			require.Contains(t, line, "loops=1)", "the worker row is read once, not per candidate:\n%s", text)
		}
	}
	require.Equal(t, 1, scans, "one read of the worker row:\n%s", text)
	require.Contains(t, text, "= ANY (w.handles)", "candidates are tested against the row read once:\n%s", text)
	require.Equal(t, 8, 20-readyUntouched(t, b, "mine"), "the explained claim took 8 of the worker's tasks")
	require.Equal(t, 200, readyUntouched(t, b, "other"))
}
