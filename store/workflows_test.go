package store_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// storeVersion writes a row of workflow_versions as a registering engine
// would, registered ago before now.
func storeVersion(t *testing.T, b bundle, workflow, version string, ago time.Duration, def string) {
	t.Helper()
	_, err := b.db.SQL.Exec(`INSERT INTO cairn.workflow_versions (workflow, version, definition, templates, registered_at, seen_at)
		VALUES ($1, $2, $3, '[]', now() - $4 * interval '1 second', now())`, workflow, version, def, ago.Seconds())
	require.NoError(t, err)
}

// setVersion gives runs (and their tasks) a version, as an enqueue would.
func setVersion(t *testing.T, b bundle, version string, runs ...int64) {
	t.Helper()
	_, err := b.db.SQL.Exec(`UPDATE cairn.run_rows SET version = $1 WHERE id = ANY($2)`, version, pq.Array(runs))
	require.NoError(t, err)
	_, err = b.db.SQL.Exec(`UPDATE cairn.tasks SET version = $1 WHERE run_id = ANY($2)`, version, pq.Array(runs))
	require.NoError(t, err)
}

// checkVersionsView runs the relation check of cairn_workflow_versions:
// its counts against the runs' tasks and the workers' rows.
func checkVersionsView(t *testing.T, b bundle) {
	t.Helper()
	rows, err := b.db.SQL.Query(pgtest.RelationChecks["cairn_workflow_versions"])
	require.NoError(t, err)
	defer rows.Close()
	var wrong []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		wrong = append(wrong, line)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, wrong)
}

// versionCounts is what the site shows of a version.
type versionCounts struct {
	Version                                         string
	Pending, Running, Paused, Interrupted, InFlight int64
	Workers                                         []string
	Newest, Retirable                               bool
}

func countsOf(vs []store.WorkflowVersionState) []versionCounts {
	out := make([]versionCounts, len(vs))
	for i, v := range vs {
		out[i] = versionCounts{v.Version, v.Pending, v.Running, v.Paused, v.Interrupted, v.InFlight,
			v.WorkerNames, v.Newest, v.Retirable}
	}
	return out
}

func TestWorkflowVersionsView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	def := `{"Name": "wf", "Queue": "default", "Tasks": [{"Name": "a", "Deps": [], "Handle": "wf.a"}]}`
	storeVersion(t, b, "wf", "v1", time.Hour, def)
	storeVersion(t, b, "wf", "v2", 0, def)
	storeVersion(t, b, "other", "x1", time.Minute, `{"Name": "other"}`)

	two := store.RunInsertParams{Workflow: "wf", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{1}},
			{Idx: 1, Name: "b", MaxAttempts: 3, MaxRescues: 3, Deps: []int{0}, Dependents: []int{}}}}
	// v1: a, b (one task each), c (two tasks, paused); v2: d.
	runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{oneTask("wf", "a", "default"), oneTask("wf", "a", "default"), two, oneTask("wf", "a", "default")})
	require.NoError(t, err)
	setVersion(t, b, "v1", runs[0].ID, runs[1].ID, runs[2].ID)
	setVersion(t, b, "v2", runs[3].ID)
	_, err = b.db.SQL.Exec(`UPDATE cairn.run_rows SET paused = true, status = 'paused' WHERE id = $1`, runs[2].ID)
	require.NoError(t, err)

	worker := func(name string, versions, handles []string) int64 {
		id, err := b.st.WorkerInsert(ctx, name, map[string]int{"default": 2})
		require.NoError(t, err)
		_, err = b.db.SQL.Exec(`UPDATE cairn.workers SET versions = $1, handles = $2 WHERE id = $3`, pq.Array(versions), pq.Array(handles), id)
		require.NoError(t, err)
		return id
	}
	w1 := worker("old", []string{"wf@v1", "other@x1"}, []string{"wf.a"})
	w2 := worker("new", []string{"wf@v2"}, []string{"wf.a"})
	w3 := worker("any", nil, nil)                          // serves every version of everything
	worker("elsewhere", nil, []string{"other.x", "wfx.a"}) // serves no task of wf
	gone := worker("gone", []string{"wf@v1"}, []string{"wf.a"})
	require.NoError(t, b.st.WorkerSetStatus(ctx, gone, "stopped"))

	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w3, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w3,
		Items: []store.TransitionItem{{TaskID: claimed[1].ID, To: store.StatusCompleted, Attempt: claimed[1].Attempt}}})
	require.NoError(t, err)

	vs, err := b.st.WorkflowVersionList(ctx, "wf")
	require.NoError(t, err)
	name := func(n string, id int64) string { return n + " #" + strconv.FormatInt(id, 10) }
	require.Equal(t, []versionCounts{
		{"v2", 1, 0, 0, 0, 1, []string{name("new", w2), name("any", w3)}, true, false},
		{"v1", 0, 1, 1, 0, 2, []string{name("old", w1), name("any", w3)}, false, false},
	}, countsOf(vs))
	require.JSONEq(t, def, string(vs[0].Definition))
	checkVersionsView(t, b)

	all, err := b.st.WorkflowVersionList(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, "other", all[0].Workflow)
	require.Equal(t, []string{name("old", w1), name("any", w3), name("elsewhere", w3+1)}, all[0].WorkerNames)
	names, err := b.st.WorkflowNameList(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"other", "wf"}, names)

	// The last v1 runs end: v1 is retirable, its workers can go.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w3,
		Items: []store.TransitionItem{{TaskID: claimed[0].ID, To: store.StatusCompleted, Attempt: claimed[0].Attempt}}})
	require.NoError(t, err)
	_, err = b.db.SQL.Exec(`DELETE FROM cairn.run_rows WHERE id = $1`, runs[2].ID)
	require.NoError(t, err)
	vs, err = b.st.WorkflowVersionList(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, versionCounts{"v1", 0, 0, 0, 0, 0, []string{name("old", w1), name("any", w3)}, false, true}, countsOf(vs)[1])
	checkVersionsView(t, b)
}

// The deploy view costs the runs in flight, not the history kept: with
// 20,000 finished runs of a version and 3 in flight (one ready, one
// running, one waiting for the ready one through After), reading it, for
// the workflow or for all, touches a few hundred buffers at most.
func TestWorkflowVersionsViewCostsTheRunsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	v1 := "v1"
	storeVersion(t, b, "big", v1, time.Hour, `{"Name": "big"}`)
	storeVersion(t, b, "big", "v2", 0, `{"Name": "big"}`)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 1000})
	require.NoError(t, err)
	const finished = 20000
	for done := 0; done < finished; done += 1000 {
		ps := make([]store.RunInsertParams, 1000)
		for i := range ps {
			ps[i] = oneTask("big", "a", "default")
			ps[i].Version = &v1
		}
		_, err := b.st.RunInsertMany(ctx, ps)
		require.NoError(t, err)
		claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1000}, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 1000)
		items := make([]store.TransitionItem, len(claimed))
		for i, c := range claimed {
			items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: c.Attempt}
		}
		_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
		require.NoError(t, err)
	}
	one := oneTask("big", "a", "default")
	one.Version = &v1
	runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{one, one})
	require.NoError(t, err)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	after := one
	after.After = []int64{runs[1].ID}
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{after})
	require.NoError(t, err)
	// As autovacuum would: the finished tasks' dead entries in the
	// partial indexes (left by their claims and ends) are cleared, as
	// they are for the claim, and the planner has statistics.
	_, err = b.db.SQL.Exec(`VACUUM ANALYZE cairn.tasks, cairn.run_rows, cairn.run_deps, cairn.workflow_versions`)
	require.NoError(t, err)

	vs, err := b.st.WorkflowVersionList(ctx, "big")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, versionCounts{Version: v1, Pending: 2, Running: 1, InFlight: 3, Workers: []string{"w #" + strconv.FormatInt(w, 10)}},
		countsOf(vs)[1])
	checkVersionsView(t, b)

	for _, where := range []string{"WHERE workflow = 'big'", ""} {
		var js []byte
		require.NoError(t, b.db.SQL.QueryRow(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM cairn.cairn_workflow_versions `+where).Scan(&js))
		var plan []struct {
			Plan struct {
				Hit  int64 `json:"Shared Hit Blocks"`
				Read int64 `json:"Shared Read Blocks"`
			}
		}
		require.NoError(t, json.Unmarshal(js, &plan))
		buffers := plan[0].Plan.Hit + plan[0].Plan.Read
		t.Logf("%q: %d buffers", where, buffers)
		assert.Less(t, buffers, int64(500), "the view %s read %d buffers with %d finished runs kept:\n%s", where, buffers, finished, js)
	}
}
