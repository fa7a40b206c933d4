package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// TestRollingDeploy: worker A registers deploy v1 (work -> after) and
// works its runs; worker B starts with v2 (work -> after -> check) while
// v1 runs are in flight; runs enqueued from a process that registers
// nothing take the latest registered version. Every v1 run completes
// with v1's tasks, run by A; every v2 run with check, run by B; no task
// is claimed by a worker that lacks its version (B leaves a ready v1
// task alone with slots free); A stops once its runs drained; nothing is
// lost or run twice.
func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, buildTestworker(t))
	a := e.startWorker("A", "-workflows", "deploy-v1")

	// Five v1 runs held in their first task: A's four slots are full and
	// one run's first task waits, ready.
	v1 := e.enqueue("deploy", 5, input{Mode: "block"})
	waitFor(t, 30*time.Second, "A to hold four v1 tasks", func() bool { return len(e.heldBy(a.id)) == 4 })

	b := e.startWorker("B", "-workflows", "deploy-v2")
	// The versions both workers registered, and what each serves.
	require.Equal(t, []string{"deploy@v1", "deploy@v2"}, e.strings(`SELECT workflow || '@' || version FROM cairn.workflow_versions ORDER BY 1`))
	require.Equal(t, []string{"A:deploy@v1", "B:deploy@v2"}, e.strings(
		`SELECT name || ':' || array_to_string(versions, ',') FROM cairn.workers WHERE status = 'running' ORDER BY name`))
	// The Workflows page (of a site that registers nothing) shows both
	// versions: v1 draining on A, v2 current on B.
	page := e.versionsPage()
	v1State, v2State := page("v1"), page("v2")
	require.Equal(t, int64(5), v1State.Runs.InFlight)
	require.Len(t, v1State.Workers, 1)
	require.True(t, strings.HasPrefix(v1State.Workers[0], "A "), "v1 served by A: %v", v1State.Workers)
	require.False(t, v1State.Retirable)
	require.True(t, v2State.Newest)
	require.Len(t, v2State.Workers, 1)
	require.True(t, strings.HasPrefix(v2State.Workers[0], "B "), "v2 served by B: %v", v2State.Workers)

	v2 := e.enqueue("deploy", 5, input{Mode: "quick"})
	for _, id := range v2 {
		require.Equal(t, store.RunCompleted, e.waitRun(id, 30*time.Second))
	}
	// B had free slots all along, and left v1's ready task alone.
	waiting := 0
	for _, id := range v1 {
		if tk := e.task(id, "work"); tk.Status == store.StatusReady {
			require.Zero(t, tk.Attempt, "run %d's waiting task was never claimed", id)
			waiting++
		}
	}
	require.Equal(t, 1, waiting)

	// The v1 runs drain on A; then A stops.
	e.openGate("gate-all")
	for _, id := range v1 {
		require.Equal(t, store.RunCompleted, e.waitRun(id, 30*time.Second))
	}
	require.Equal(t, []string{"0"}, e.strings(`SELECT count(*)::text FROM cairn.runs WHERE version = 'v1' AND finished_at IS NULL`),
		"no v1 run in flight: A can go")
	a.signal(syscall.SIGTERM)
	require.NoError(t, a.wait(30*time.Second))
	require.Equal(t, []string{"deploy@v2"}, e.strings(
		`SELECT DISTINCT unnest(versions) FROM cairn.workers WHERE status = 'running' ORDER BY 1`), "only v2 is served now")
	// Now the page shows only v2 served, and v1 retirable: its last run
	// finished, its workers can go.
	v1State, v2State = page("v1"), page("v2")
	require.True(t, v1State.Retirable)
	require.Zero(t, v1State.Runs.InFlight)
	require.Empty(t, v1State.Workers)
	require.True(t, v2State.Newest)
	require.False(t, v2State.Retirable)
	require.NotEmpty(t, v2State.Workers)

	// Each run kept its version, its version's tasks, and the workers of
	// its version.
	check := func(runs []int64, version, worker string, tasks []string, by int64) {
		t.Helper()
		for _, id := range runs {
			r := e.run(id)
			require.NotNil(t, r.Version, "run %d", id)
			require.Equal(t, version, *r.Version, "run %d", id)
			var names []string
			for _, tk := range e.tasks(id) {
				names = append(names, tk.Name)
				require.Equal(t, store.StatusCompleted, tk.Status, "run %d task %s", id, tk.Name)
				require.Equal(t, by, e.completedBy(tk.ID), "run %d task %s ran on %s", id, tk.Name, worker)
			}
			require.Equal(t, tasks, names, "run %d", id)
		}
	}
	check(v1, "v1", "A", []string{"work", "after"}, a.id)
	check(v2, "v2", "B", []string{"work", "after", "check"}, b.id)
	require.Equal(t, []string{"0"}, e.strings(`
SELECT count(*)::text FROM cairn.task_events ev JOIN cairn.tasks t ON t.id = ev.task_id JOIN cairn.workers w ON w.id = ev.worker_id
WHERE ev.to_status = 'running' AND NOT (t.workflow || '@' || t.version = ANY(w.versions))`), "no task claimed by a worker lacking its version")
	e.checkNoDuplicates(append(append([]int64{}, v1...), v2...))
}

// strings reads one text column of query's rows.
func (e *env) strings(query string) []string {
	e.t.Helper()
	rows, err := e.db.Query(query)
	require.NoError(e.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(e.t, rows.Scan(&s))
		out = append(out, strings.TrimSpace(s))
	}
	require.NoError(e.t, rows.Err())
	return out
}

// deployVersion is a version of deploy as the site's JSON API shows it.
type deployVersion struct {
	Version string `json:"version"`
	Runs    struct {
		InFlight int64 `json:"in_flight"`
	} `json:"runs"`
	Workers   []string `json:"workers"`
	Newest    bool     `json:"newest"`
	Retirable bool     `json:"retirable"`
}

// versionsPage serves the site over the test's database from a process
// that registers nothing, and returns a reader of deploy's versions as
// its Workflows page shows them (the page's HTML must name the version,
// and its state as the API gives it).
func (e *env) versionsPage() func(version string) deployVersion {
	e.t.Helper()
	srv, err := web.New(web.Config{Engine: e.adminEngine(false), Reads: e.st, ListenAddr: "127.0.0.1:0"})
	require.NoError(e.t, err)
	ts := httptest.NewServer(srv.Handler())
	e.t.Cleanup(ts.Close)
	get := func(path string) []byte {
		res, err := http.Get(ts.URL + path)
		require.NoError(e.t, err)
		defer res.Body.Close()
		require.Equal(e.t, http.StatusOK, res.StatusCode, path)
		b, err := io.ReadAll(res.Body)
		require.NoError(e.t, err)
		return b
	}
	return func(version string) deployVersion {
		e.t.Helper()
		var wf struct {
			Versions []deployVersion `json:"versions"`
		}
		require.NoError(e.t, json.Unmarshal(get("/api/workflows/deploy"), &wf))
		html := string(get("/workflows"))
		for _, v := range wf.Versions {
			if v.Version == version {
				require.Contains(e.t, html, version, "the Workflows page names version %s", version)
				if v.Retirable {
					require.Contains(e.t, html, "retirable", "the Workflows page says an old version can go")
				}
				return v
			}
		}
		e.t.Fatalf("version %s of deploy not on the Workflows page: %+v", version, wf.Versions)
		return deployVersion{}
	}
}
