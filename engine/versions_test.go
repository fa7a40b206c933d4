package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// chain is workflow "deploy" of tasks named in order, each after the one
// before; version "" takes the content hash. Each handler records
// "engine:task" in ran.
func versionChain(version string, compatible []string, eng string, ran *ranLog, names ...string) engine.Workflow {
	wf := engine.Workflow{Name: "deploy", Version: version, Compatible: compatible}
	for i, n := range names {
		t := engine.Task{Name: n, Run: func(ctx context.Context, h *engine.TaskHandle) error {
			ran.add(eng + ":" + n)
			return nil
		}}
		if i > 0 {
			t.Deps = []string{names[i-1]}
		}
		wf.Tasks = append(wf.Tasks, t)
	}
	return wf
}

// ranLog records what handlers ran.
type ranLog struct {
	mu  sync.Mutex
	ran []string
}

func (r *ranLog) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, s)
}

func (r *ranLog) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran...)
}

// versionWorker starts a worker engine named name on db with workflows.
func versionWorker(t *testing.T, db *pgtest.DB, name string, wfs ...engine.Workflow) *engine.Engine {
	t.Helper()
	cfg := fastConfig(db, t)
	cfg.WorkerName = name
	eng := newEngine(t, db, cfg)
	for _, wf := range wfs {
		require.NoError(t, eng.Register(wf))
	}
	start(t, eng)
	return eng
}

// versionsOf reads workflow_versions: "workflow@version" -> compatible.
func versionsOf(t *testing.T, db *pgtest.DB) map[string][]string {
	t.Helper()
	rows, err := db.SQL.Query(`SELECT workflow || '@' || version, array_to_json(compatible) FROM cairn.workflow_versions`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var k string
		var c []byte
		require.NoError(t, rows.Scan(&k, &c))
		var cs []string
		require.NoError(t, json.Unmarshal(c, &cs))
		out[k] = cs
	}
	require.NoError(t, rows.Err())
	return out
}

func TestEngineWithoutWorkflowsEnqueuesAStoredOne(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ran := &ranLog{}
	w := versionWorker(t, db, "w", versionChain("v1", nil, "w", ran, "a", "b"))
	require.Equal(t, map[string][]string{"deploy@v1": {}}, versionsOf(t, db), "Start stored the definition")
	var def engine.WorkflowDef
	require.NoError(t, db.SQL.QueryRow(`SELECT definition FROM cairn.workflow_versions`).Scan(jsonScan{&def}))
	require.Equal(t, w.WorkflowDefs()[0], def, "the definition is the WorkflowDef the engine describes")

	// A process that registers nothing (the site, the CLI, a producer).
	cfg := fastConfig(db, t)
	cfg.NoWorker = true
	site := newEngine(t, db, cfg)
	start(t, site)
	run, err := site.Enqueue(ctx, "deploy", map[string]any{"n": 1})
	require.NoError(t, err)
	st := newStore(t, db, "")
	require.Equal(t, store.RunCompleted, waitRun(t, st, run.ID, 10*time.Second).Status)
	got, err := st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "v1", *got.Version)
	require.Equal(t, "v1", *taskByName(t, st, run.ID, "b").Version)
	require.ElementsMatch(t, []string{"w:a", "w:b"}, ran.list())

	// Several at once, one read of the stored version.
	runs, err := site.EnqueueMany(ctx, []engine.EnqueueParams{{Workflow: "deploy"}, {Workflow: "deploy"}})
	require.NoError(t, err)
	for _, r := range runs {
		require.Equal(t, store.RunCompleted, waitRun(t, st, r.ID, 10*time.Second).Status)
	}

	// Neither registered nor stored.
	_, err = site.Enqueue(ctx, "nope", nil)
	require.ErrorIs(t, err, engine.ErrUnknownWorkflow)
}

// jsonScan scans a jsonb column into v.
type jsonScan struct{ v any }

func (j jsonScan) Scan(src any) error { return json.Unmarshal(src.([]byte), j.v) }

func TestCompatibleVersionServesEarlierRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ran := &ranLog{}
	// v1 is known (its producer registered it) but no worker of it runs.
	cfg := fastConfig(db, t)
	cfg.NoWorker = true
	old := newEngine(t, db, cfg)
	require.NoError(t, old.Register(versionChain("v1", nil, "old", ran, "a", "b")))
	start(t, old)
	run, err := old.Enqueue(ctx, "deploy", nil)
	require.NoError(t, err)
	st := newStore(t, db, "")

	// A v2 worker that does not serve v1: the run waits, and says why.
	versionWorker(t, db, "v2-only", versionChain("v2", nil, "v2-only", ran, "a", "b", "c"))
	a := taskByName(t, st, run.ID, "a")
	wait, err := st.TaskWaitGet(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.WaitNoVersion, wait.Reason)
	require.Equal(t, "no live worker serves version v1 of workflow deploy", wait.Detail)

	// A v2 worker whose handlers serve v1 too completes it, with v1's
	// tasks only, run by name.
	versionWorker(t, db, "v2-compat", versionChain("v2", []string{"v1"}, "v2-compat", ran, "a", "b", "c"))
	require.Equal(t, store.RunCompleted, waitRun(t, st, run.ID, 10*time.Second).Status)
	require.Equal(t, []string{"v2-compat:a", "v2-compat:b"}, ran.list())
	require.Equal(t, map[string][]string{"deploy@v1": {}, "deploy@v2": {"v1"}}, versionsOf(t, db))
	var served string
	require.NoError(t, db.SQL.QueryRow(`SELECT array_to_string(versions, ',') FROM cairn.workers WHERE name = 'v2-compat'`).Scan(&served))
	require.Equal(t, "deploy@v1,deploy@v2", served)
}

func TestDefaultVersionIsAContentHash(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ran := &ranLog{}
	version := func(wf engine.Workflow) string {
		t.Helper()
		cfg := fastConfig(db, t)
		cfg.NoWorker = true
		eng := newEngine(t, db, cfg)
		require.NoError(t, eng.Register(wf))
		start(t, eng)
		var v string
		require.NoError(t, db.SQL.QueryRow(`SELECT version FROM cairn.workflow_versions ORDER BY seen_at DESC, registered_at DESC LIMIT 1`).Scan(&v))
		require.NoError(t, eng.Shutdown(context.Background()))
		return v
	}
	v1 := version(versionChain("", nil, "x", ran, "a", "b"))
	require.Regexp(t, `^h[0-9a-f]{12}$`, v1)
	require.Equal(t, v1, version(versionChain("", nil, "other handlers", ran, "a", "b")), "the same definition, the same version")
	retried := versionChain("", nil, "x", ran, "a", "b")
	retried.Tasks[1].Retry.MaxAttempts = 7
	v2 := version(retried)
	require.NotEqual(t, v1, v2, "a changed retry policy is a new version")
	v3 := version(versionChain("", nil, "x", ran, "a", "b", "c"))
	require.NotContains(t, []string{v1, v2}, v3, "a new task is a new version")
	require.Len(t, versionsOf(t, db), 3)

	// Bad versions are refused, naming them.
	eng := newEngine(t, db, fastConfig(db, t))
	err := eng.Register(versionChain("bad version", nil, "x", ran, "a"))
	require.ErrorIs(t, err, engine.ErrInvalidWorkflow)
	require.ErrorContains(t, err, `version "bad version"`)
	err = eng.Register(versionChain("v1", []string{"v1"}, "x", ran, "a"))
	require.ErrorIs(t, err, engine.ErrInvalidWorkflow)
	require.ErrorContains(t, err, `compatible names its own version "v1"`)
}
