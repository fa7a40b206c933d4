package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// TestPostgresOutage crashes PostgreSQL (pg_ctl stop -m immediate) under a
// worker process with tasks flowing, keeps it down for a few seconds and
// starts it again. While it is down the worker costs next to nothing: a
// small share of one core and a handful of log lines. No task is lost and
// none runs twice (the outage is shorter than the lease), and tasks flow
// again soon after the restart.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("measuring a process's CPU time needs /proc")
	}
	bin := buildTestworker(t)
	ctx := context.Background()
	cluster, url, db := startPrivateCluster(t)
	e := newEnvOn(t, bin, db, url)

	// A cluster-wide cap of 2 on a worker of 4 slots: tasks flow and slots
	// stay free, so the worker keeps claiming while the database is down
	// (with every slot busy there is nothing to claim).
	maxRunning := 2
	require.NoError(t, e.st.QueueEnsure(ctx, []string{engine.DefaultQueue}))
	require.NoError(t, e.st.QueueSetCap(ctx, engine.DefaultQueue, &maxRunning))
	w := e.startWorker("w", "-slots", "4", "-lease", "15s")
	runs := e.enqueue("requeue", 150, input{Mode: "sleep", SleepMs: 20})
	waitFor(t, 30*time.Second, "tasks to flow", func() bool { return e.countMarkers("done") >= 40 })

	pid := w.cmd.Process.Pid
	logsBefore := strings.Count(w.stderr.String(), "\n")
	require.NoError(t, cluster.StopImmediate())
	cpuBefore := cpuTicks(t, pid)
	down := time.Now()
	const window = 4 * time.Second
	<-time.After(window) // the length of the outage under test, not a wait for a condition
	cpu := time.Duration(cpuTicks(t, pid)-cpuBefore) * time.Second / clockTicks
	wasDown := time.Since(down)
	stderr := w.stderr.String()
	logged := strings.Count(stderr, "\n") - logsBefore
	startsAtRestart := e.countMarkers("start")
	require.NoError(t, cluster.StartAgain(ctx))
	restarted := time.Now()

	t.Logf("worker while the database was down for %s: %s CPU (%.1f%% of a core), %d log lines",
		wasDown.Round(time.Millisecond), cpu, 100*cpu.Seconds()/wasDown.Seconds(), logged)
	require.Less(t, cpu.Seconds(), 0.2*wasDown.Seconds(), "worker CPU while the database is down")
	require.Less(t, logged, 50, "log lines while the database is down:\n%s", stderr)
	require.Contains(t, stderr, `msg="database unreachable"`)

	waitFor(t, 10*time.Second, "new tasks to start after the restart", func() bool {
		return e.countMarkers("start") > startsAtRestart
	})
	t.Logf("tasks flowed again %s after the restart", time.Since(restarted).Round(time.Millisecond))
	waitFor(t, 10*time.Second, `the worker to log "database back"`, func() bool {
		return strings.Contains(w.stderr.String(), `msg="database back"`)
	})

	for _, run := range runs {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 90*time.Second), "run %d", run)
	}
	for _, run := range runs {
		for _, tk := range e.tasks(run) {
			require.Equal(t, store.StatusCompleted, tk.Status)
			require.Equal(t, 1, e.markers("start", tk.ID, 0), "task %d (attempt %d) executions", tk.ID, tk.Attempt)
			require.Equal(t, 1, e.markers("done", tk.ID, 0), "task %d completions", tk.ID)
		}
	}
	require.Equal(t, "running", e.worker(w.id).Status, "the worker heartbeats again")
	all := w.stderr.String()
	t.Logf("worker logged %q %d times, %q %d times", "database unreachable", strings.Count(all, `msg="database unreachable"`),
		"database back", strings.Count(all, `msg="database back"`))
}

// startPrivateCluster starts a PostgreSQL cluster of the test's own (the
// test crashes or restarts its server) with a migrated database, and
// returns it, the database's URL and a pool on it.
func startPrivateCluster(t *testing.T) (*pgcluster.Cluster, string, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cairn-e2e-pg-")
	require.NoError(t, err)
	// Fast, but with commits durable against a crash of the server: with
	// synchronous_commit off an acknowledged claim can vanish in the
	// crash, and its task would rightly run again. (fsync only guards
	// against a crash of the machine.)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Fast: true,
		Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		os.RemoveAll(dir)
		if errors.Is(err, pgcluster.ErrNoPostgres) {
			t.Skip("stopping a server needs a private cluster: ", err)
		}
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = cluster.Remove() })
	maint, err := sql.Open("postgres", cluster.URL("postgres"))
	require.NoError(t, err)
	_, err = maint.Exec("CREATE DATABASE cairn_e2e")
	maint.Close()
	require.NoError(t, err)
	url := cluster.URL("cairn_e2e")
	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var syncCommit string
	require.NoError(t, db.QueryRow("SHOW synchronous_commit").Scan(&syncCommit))
	require.Equal(t, "on", syncCommit)
	runner, err := migrations.NewRunner(db, migrations.DefaultSchema)
	require.NoError(t, err)
	_, err = runner.Up(ctx, 0)
	require.NoError(t, err)
	return cluster, url, db
}

// clockTicks is USER_HZ, the unit of CPU times in /proc: 100 on Linux.
const clockTicks = 100

// cpuTicks returns the user plus system CPU time of process pid in clock
// ticks, from /proc/<pid>/stat.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	require.Greater(t, len(f), 12, "/proc/%d/stat: %s", pid, s)
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, errors.Join(err1, err2), "/proc/%d/stat: %s", pid, s)
	return utime + stime
}
