package store_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// versioned is a run of one task, wf.a, in the default queue, created
// with version v ("": none).
func versioned(wf, v string) store.RunInsertParams {
	p := oneTask(wf, "a", "default")
	if v != "" {
		p.Version = &v
	}
	return p
}

// claimedVersions claims up to 20 tasks of the default queue for worker
// w (keyed: with the keyed claim) and returns their versions, sorted
// ("-" for none).
func claimedVersions(t *testing.T, b bundle, w int64, keyed bool) []string {
	t.Helper()
	got, err := b.st.TaskClaim(context.Background(), store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{20},
		Lease: time.Minute, Keyed: keyed})
	require.NoError(t, err)
	var out []string
	for _, c := range got {
		var v *string
		require.NoError(t, b.db.SQL.QueryRow(`SELECT version FROM cairn.tasks WHERE id = $1`, c.ID).Scan(&v))
		if v == nil {
			out = append(out, "-")
		} else {
			out = append(out, *v)
		}
	}
	sort.Strings(out)
	return out
}

func TestClaimRoutesByVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// v2's tasks come first in claim order: a v1 worker's claims pass them.
	_, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{versioned("w", "v2"), versioned("w", "v2"),
		versioned("w", "v1"), versioned("w", ""), versioned("w", "v1")})
	require.NoError(t, err)
	var runVersions string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT string_agg(coalesce(version, '-'), ',' ORDER BY id) FROM cairn.runs`).Scan(&runVersions))
	require.Equal(t, "v2,v2,v1,-,v1", runVersions, "each run records its version")

	v1, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "v1", Queues: map[string]int{"default": 20},
		Handles: []string{"w.a", "w.t"}, Versions: []string{"w@v1", "other@v2"}})
	require.NoError(t, err)
	_, ok, err := b.st.TaskClaimFloor(ctx, "default", v1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"-", "v1", "v1"}, claimedVersions(t, b, v1, false),
		"v1's runs and the unversioned one; never v2's (nor w@v2 through other@v2)")
	_, ok, err = b.st.TaskClaimFloor(ctx, "default", v1)
	require.NoError(t, err)
	require.False(t, ok, "the floor's read routes as the claim: v2's tasks are not the v1 worker's")

	// The wait says why, and cairn_unroutable lists them by version.
	var ready []int64
	rows, err := b.db.SQL.Query(`SELECT id FROM cairn.tasks WHERE status = 'ready' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ready = append(ready, id)
	}
	require.NoError(t, rows.Err())
	waits, err := b.st.TaskWaitList(ctx, ready)
	require.NoError(t, err)
	require.Len(t, waits, 2)
	require.Equal(t, store.WaitNoVersion, waits[0].Reason)
	require.Equal(t, "no live worker serves version v2 of workflow w", waits[0].Detail)
	un, err := b.st.UnroutableList(ctx)
	require.NoError(t, err)
	require.Len(t, un, 1)
	require.Equal(t, "v2", *un[0].Version)
	require.EqualValues(t, 2, un[0].Ready)

	// The keyed claim routes the same way.
	conc := &store.FlowTemplate{Group: "g", Max: 10}
	k1, k2 := keyedTask("w", "default", `{}`, conc, nil), keyedTask("w", "default", `{}`, conc, nil)
	v := "v1"
	k1.Version = &v
	v2s := "v2"
	k2.Version = &v2s
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{k2, k1})
	require.NoError(t, err)
	require.Equal(t, []string{"v1"}, claimedVersions(t, b, v1, true))

	// A v2 worker takes v2's tasks; the finish-and-claim hands on by
	// version too.
	v2, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "v2", Queues: map[string]int{"default": 20},
		Handles: []string{"w.a", "w.t"}, Versions: []string{"w@v2"}})
	require.NoError(t, err)
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{versioned("w", "v1"), versioned("w", "v2")})
	require.NoError(t, err)
	first, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: v2, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, first, 1)
	_, more, err := b.st.TaskFinishAndClaimOne(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: v2,
		Items: []store.TransitionItem{{TaskID: first[0].ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: first[0].Attempt}}},
		store.ClaimParams{WorkerID: v2, Queues: []string{"default"}, Limits: []int{20}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 2, "v2's other tasks, not v1's")
	require.Equal(t, []string{"v2"}, claimedVersions(t, b, v2, true), "v2's keyed task")
	require.Empty(t, claimedVersions(t, b, v2, false))

	// Changing a worker's versions changes what it claims; NULL serves any.
	require.NoError(t, b.st.WorkerSetRouting(ctx, v2, []string{"w.a", "w.t"}, []string{"w@v1"}))
	require.Equal(t, []string{"v1"}, claimedVersions(t, b, v2, false))
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{versioned("w", "v9"), versioned("w", "")})
	require.NoError(t, err)
	anyw, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "any", Queues: map[string]int{"default": 20}, Handles: []string{"w.a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"-", "v9"}, claimedVersions(t, b, anyw, false), "a worker without versions serves any")
	require.ErrorIs(t, b.st.WorkerSetRouting(ctx, 1<<40, nil, nil), store.ErrNotFound)
}

func TestRunInsertTakesEachVersionsTemplates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// One statement, two versions of one workflow: each run gets its own
	// version's tasks.
	v1, v2 := versioned("w", "v1"), versioned("w", "v2")
	v2.Tasks = []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{1}},
		{Idx: 1, Name: "b", MaxAttempts: 3, MaxRescues: 3, Deps: []int{0}, Dependents: []int{}}}
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{v1, v2, versioned("w", "")})
	require.NoError(t, err)
	for i, want := range []string{"v1:a", "v2:a,b", ":a"} {
		var got string
		require.NoError(t, b.db.SQL.QueryRow(`SELECT coalesce(r.version, '') || ':' || string_agg(t.name || coalesce('@' || nullif(t.version, r.version), ''), ',' ORDER BY t.idx)
			FROM cairn.run_rows r JOIN cairn.tasks t ON t.run_id = r.id WHERE r.id = $1 GROUP BY r.version`, res[i].ID).Scan(&got))
		require.Equal(t, want, got, "run %d", i)
	}
}

func TestWorkflowVersionSaveAndLatest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.WorkflowVersionLatest(ctx, "w")
	require.ErrorIs(t, err, store.ErrNotFound)
	def := json.RawMessage(`{"Name": "w"}`)
	tpl := json.RawMessage(`[{"idx": 0, "name": "a"}]`)
	require.NoError(t, b.st.WorkflowVersionSave(ctx, []store.WorkflowVersion{{Workflow: "w", Version: "v1", Definition: def, Templates: tpl}}))
	require.NoError(t, b.st.WorkflowVersionSave(ctx, []store.WorkflowVersion{{Workflow: "w", Version: "v2", Definition: def, Templates: tpl,
		Compatible: []string{"v1"}}}))
	got, err := b.st.WorkflowVersionLatest(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "v2", got.Version)
	require.Equal(t, []string{"v1"}, got.Compatible)
	// Registering v1 again makes it the latest seen; the first
	// registration's time stays.
	var before time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT registered_at FROM cairn.workflow_versions WHERE version = 'v1'`).Scan(&before))
	require.NoError(t, b.st.WorkflowVersionSave(ctx, []store.WorkflowVersion{{Workflow: "w", Version: "v1", Definition: def, Templates: tpl}}))
	got, err = b.st.WorkflowVersionLatest(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "v1", got.Version)
	require.Equal(t, []string{}, got.Compatible)
	var after time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT registered_at FROM cairn.workflow_versions WHERE version = 'v1'`).Scan(&after))
	require.True(t, before.Equal(after))
}
