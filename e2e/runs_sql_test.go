package e2e

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// testOneTaskRunsReadFromOutside watches one-task runs (whose rows no
// transition writes, see migration 019) with nothing but plain SQL on
// cairn.runs, as a monitoring query would: quick runs complete, deferred
// ones run, a SIGKILLed worker's runs are rescued and run again on
// another, and all end completed, with their counters and times, while the
// stored rows under the view still say pending.
func testOneTaskRunsReadFromOutside(t *testing.T, bin string) {
	e := newEnv(t, bin)
	a := e.startWorker("a", "-slots", "4")
	quick := e.enqueue("single", 12, input{Mode: "quick"})
	parked := e.enqueue("single", 3, input{Mode: "defer", EveryMs: 100})
	all := slices.Concat(quick, parked)

	// count reads, with plain SQL, how many of ids cairn.runs shows in
	// status with the counters and times that status implies.
	count := func(ids []int64, status string) int {
		t.Helper()
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.runs WHERE id = ANY($1) AND status = $2
			AND task_count = 1 AND done_tasks = (status = 'completed')::int
			AND (started_at IS NOT NULL) = (status <> 'pending') AND (finished_at IS NOT NULL) = (status = 'completed')
			AND (finished_at IS NULL OR finished_at >= started_at)`, pq.Array(ids), status).Scan(&n))
		return n
	}
	waitFor(t, 20*time.Second, "12 quick runs completed (plain SQL)", func() bool { return count(quick, "completed") == 12 })
	waitFor(t, 20*time.Second, "3 deferred runs running (plain SQL)", func() bool {
		var deferred int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE run_id = ANY($1) AND status = 'deferred'`, pq.Array(parked)).Scan(&deferred))
		return deferred == 3 && count(parked, "running") == 3
	})
	var stored int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.run_rows WHERE id = ANY($1) AND status = 'pending'`, pq.Array(all)).Scan(&stored))
	require.Equal(t, len(all), stored, "the rows under the view are left as enqueued: the table alone would have said pending")

	// The worker dies; another rescues its deferred tasks and runs them.
	a.signal(syscall.SIGKILL)
	e.startWorker("b", "-slots", "4")
	waitFor(t, 30*time.Second, "3 rescued runs running again (plain SQL)", func() bool {
		var again int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE run_id = ANY($1) AND status = 'deferred' AND attempt = 2`, pq.Array(parked)).Scan(&again))
		return again == 3 && count(parked, "running") == 3
	})
	e.openGate("gate-all")
	waitFor(t, 20*time.Second, "every run completed (plain SQL)", func() bool { return count(all, "completed") == len(all) })
	var statuses []string
	require.NoError(t, e.db.QueryRow(`SELECT array_agg(DISTINCT status) FROM cairn.runs`).Scan(pq.Array(&statuses)))
	require.Equal(t, []string{"completed"}, statuses, "SELECT status, count(*) FROM cairn.runs GROUP BY 1")
}
