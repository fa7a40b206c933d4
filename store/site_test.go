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

// siteRuns inserts n one-task runs of workflow with inputs {"n": i, "tag": tag}.
func siteRuns(t *testing.T, st *store.Store, workflow, tag string, n int) []int64 {
	t.Helper()
	ps := single(n)
	for i := range ps {
		ps[i].Workflow = workflow
		ps[i].Input = json.RawMessage(fmt.Sprintf(`{"n": %d, "tag": %q}`, i, tag))
	}
	res, err := st.RunInsertMany(context.Background(), ps)
	require.NoError(t, err)
	ids := make([]int64, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func TestRunListFilteredKeysetPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// One statement: every run shares created_at, so the id breaks ties.
	siteRuns(t, b.st, "one", "a", 70)
	siteRuns(t, b.st, "one", "b", 50)

	seen := map[int64]bool{}
	var pages [][]store.RunListItem
	p := &store.RunListParams{Limit: 50}
	for {
		page, err := b.st.RunListFiltered(ctx, p)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for i, r := range page {
			require.False(t, seen[r.ID], "run %d on two pages", r.ID)
			seen[r.ID] = true
			if i > 0 {
				prev := page[i-1]
				require.True(t, prev.CreatedAt.After(r.CreatedAt) || prev.CreatedAt.Equal(r.CreatedAt) && prev.ID > r.ID, "order")
			}
			require.Equal(t, 1, r.TasksOngoing)
		}
		pages = append(pages, page)
		last := page[len(page)-1]
		p = &store.RunListParams{Limit: 50, After: &store.RunCursor{CreatedAt: last.CreatedAt, ID: last.ID}}
	}
	require.Len(t, seen, 120)
	require.Len(t, pages, 3)

	// Before the first row of page 2 is page 1, in the same order.
	first := pages[1][0]
	back, err := b.st.RunListFiltered(ctx, &store.RunListParams{Limit: 50, Before: &store.RunCursor{CreatedAt: first.CreatedAt, ID: first.ID}})
	require.NoError(t, err)
	require.Len(t, back, 50)
	for i := range back {
		require.Equal(t, pages[0][i].ID, back[i].ID)
	}
}

func TestRunListFilteredFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := siteRuns(t, b.st, "alpha", "x", 3)
	siteRuns(t, b.st, "beta", "y", 2)
	// Spread creation times: alpha runs are an hour old.
	_, err := b.db.SQL.Exec(`UPDATE cairn.run_rows SET created_at = now() - interval '1 hour' WHERE workflow = 'alpha'`)
	require.NoError(t, err)
	_, err = b.db.SQL.Exec(`UPDATE cairn.run_rows SET status = 'failed' WHERE id = $1`, a[0])
	require.NoError(t, err)

	count := func(p store.RunListParams) int {
		t.Helper()
		rows, err := b.st.RunListFiltered(ctx, &p)
		require.NoError(t, err)
		n, err := b.st.RunCountFiltered(ctx, &p, 1000)
		require.NoError(t, err)
		require.Equal(t, len(rows), n, "count agrees with list")
		return n
	}
	require.Equal(t, 5, count(store.RunListParams{}))
	require.Equal(t, 3, count(store.RunListParams{Workflow: "alpha"}))
	require.Equal(t, 1, count(store.RunListParams{Statuses: []string{"failed"}}))
	require.Equal(t, 5, count(store.RunListParams{Statuses: []string{"failed", "pending"}}))
	cut := time.Now().Add(-30 * time.Minute)
	require.Equal(t, 2, count(store.RunListParams{CreatedFrom: &cut}))
	require.Equal(t, 3, count(store.RunListParams{CreatedTo: &cut}))
	// key:value terms: each term is an OR of documents, terms are ANDed.
	require.Equal(t, 2, count(store.RunListParams{InputMatch: [][]json.RawMessage{{json.RawMessage(`{"n": 1}`), json.RawMessage(`{"n": "1"}`)}}}))
	require.Equal(t, 1, count(store.RunListParams{InputMatch: [][]json.RawMessage{{json.RawMessage(`{"n": 1}`)}, {json.RawMessage(`{"tag": "x"}`)}}}))
	require.Equal(t, 0, count(store.RunListParams{InputMatch: [][]json.RawMessage{{json.RawMessage(`{"tag": "z"}`)}}}))

	ids, err := b.st.RunIDListFiltered(ctx, &store.RunListParams{Workflow: "alpha", Limit: 2})
	require.NoError(t, err)
	require.Len(t, ids, 2)
	n, err := b.st.RunCountFiltered(ctx, &store.RunListParams{}, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "count stops at upTo")
}

func TestSiteTaskQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	runID := res[0].ID
	w, err := b.st.WorkerInsert(ctx, "w1", map[string]int{"default": 3})
	require.NoError(t, err)

	claim := func() store.Claimed {
		t.Helper()
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0]
	}
	a := claim()
	slots, err := b.st.WorkerSlotList(ctx, 10)
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, 1, slots[0].Running)
	require.Equal(t, 3, slots[0].Slots)
	require.Equal(t, map[string]int{"default": 3}, slots[0].Queues)

	depth, err := b.st.QueueDepthList(ctx)
	require.NoError(t, err)
	require.Len(t, depth, 1)
	require.Equal(t, "default", depth[0].Queue)
	require.EqualValues(t, 1, depth[0].Running)
	require.EqualValues(t, 3, depth[0].Slots)

	// a completes with output; b fails with a log.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: a.ID, To: store.StatusCompleted, Output: json.RawMessage(`{"a": 1}`)}}})
	require.NoError(t, err)
	bt := claim()
	msg := "boom"
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: bt.ID, To: store.StatusFailed, Error: &msg,
			Detail: json.RawMessage(`{"log": [{"msg": "trying"}], "stack": "main.go:1"}`)}}})
	require.NoError(t, err)

	attempts, err := b.st.TaskAttemptList(ctx, bt.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, store.StatusFailed, attempts[0].Outcome)
	require.Equal(t, "boom", *attempts[0].Error)
	require.NotNil(t, attempts[0].StartedAt)
	require.Contains(t, string(attempts[0].Detail), "trying")

	tasks, err := b.st.TaskListByRun(ctx, runID)
	require.NoError(t, err)
	deps, err := b.st.TaskDepList(ctx, tasks[3].ID)
	require.NoError(t, err)
	require.Len(t, deps, 2)
	require.Equal(t, "b", deps[0].Name)
	require.Equal(t, "c", deps[1].Name)

	failed, err := b.st.TaskRefListByRunsStatus(ctx, []int64{runID}, store.StatusFailed)
	require.NoError(t, err)
	require.Equal(t, []store.TaskRef{{ID: bt.ID, RunID: runID}}, failed)

	evs, err := b.st.EventListByRunRecent(ctx, runID, 3)
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.Less(t, evs[0].ID, evs[2].ID, "oldest first")

	counts, err := b.st.TaskCountsByState(ctx)
	require.NoError(t, err)
	byState := map[string]int64{}
	for _, c := range counts {
		require.Equal(t, "diamond", c.Workflow)
		byState[c.Status] += c.Tasks
	}
	require.EqualValues(t, 1, byState[store.StatusCompleted])
	require.EqualValues(t, 1, byState[store.StatusFailed])

	now := time.Now()
	buckets, err := b.st.ThroughputPerMinute(ctx, now.Add(-59*time.Minute), now.Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, buckets, 61)
	var done, bad int64
	for _, bk := range buckets {
		done += bk.Completed
		bad += bk.Failed
	}
	require.EqualValues(t, 1, done)
	require.EqualValues(t, 1, bad)

	require.NoError(t, b.st.DatabasePing(ctx))
}
