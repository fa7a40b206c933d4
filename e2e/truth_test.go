package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

// checkTruthAtEnd makes t, once it and everything it started have
// finished, check its database from outside: plain SQL on cairn.runs
// agrees with the JSON API (GET /api/runs/{id}) for every run, and every
// relation the README offers for reading agrees with the task rows
// (pgtest.CheckRelations). Register it right after the database is made,
// so that it runs after the cleanups of the processes the test starts.
func checkTruthAtEnd(t *testing.T, db *sql.DB) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			return // the test's own failure says more
		}
		runsAgreeWithAPI(t, db)
		pgtest.CheckRelations(t, db, "end of "+t.Name())
	})
}

// runFacts are what a reader asks of a run: status, counters and times.
type runFacts struct {
	Status           string     `json:"status"`
	TaskCount        int        `json:"task_count"`
	DoneTasks        int        `json:"done_tasks"`
	FailedTasks      int        `json:"failed_tasks"`
	CancelledTasks   int        `json:"cancelled_tasks"`
	InterruptedTasks int        `json:"interrupted_tasks"`
	StartedAt        *time.Time `json:"started_at"`
	FinishedAt       *time.Time `json:"finished_at"`
}

func (f runFacts) String() string {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s %d/%d failed %d cancelled %d interrupted %d started %s finished %s",
		f.Status, f.DoneTasks, f.TaskCount, f.FailedTasks, f.CancelledTasks, f.InterruptedTasks, at(f.StartedAt), at(f.FinishedAt))
}

// runsAgreeWithAPI compares, for every run, cairn.runs read with plain
// SQL and the API's answer. A run that moves between the reads is read
// again (a process of the test may still be writing).
func runsAgreeWithAPI(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	eng, err := engine.New(db, engine.Config{NoWorker: true})
	require.NoError(t, err)
	st, err := store.New(db, engine.DefaultSchema)
	require.NoError(t, err)
	srv, err := web.New(web.Config{Engine: eng, Reads: st, ListenAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	h := srv.Handler()

	viaSQL := func(id int64) string {
		var f runFacts
		require.NoError(t, db.QueryRowContext(ctx, `SELECT status, task_count, done_tasks, failed_tasks, cancelled_tasks, interrupted_tasks, started_at, finished_at
			FROM cairn.runs WHERE id = $1`, id).Scan(&f.Status, &f.TaskCount, &f.DoneTasks, &f.FailedTasks, &f.CancelledTasks, &f.InterruptedTasks, &f.StartedAt, &f.FinishedAt))
		return f.String()
	}
	viaAPI := func(id int64) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/runs/"+strconv.FormatInt(id, 10), nil))
		require.Equal(t, http.StatusOK, rec.Code, "GET /api/runs/%d: %s", id, rec.Body.String())
		var body struct {
			Run runFacts `json:"run"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return body.Run.String()
	}

	rows, err := db.QueryContext(ctx, `SELECT id FROM cairn.runs ORDER BY id`)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	var lagging int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM cairn.runs v JOIN cairn.run_rows r ON r.id = v.id
		WHERE (v.status, v.done_tasks) IS DISTINCT FROM (r.status, r.done_tasks)`).Scan(&lagging))
	t.Logf("%d runs (%d of them with a stored row that lags): plain SQL on cairn.runs and the API compared", len(ids), lagging)
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for {
			before, api, after := viaSQL(id), viaAPI(id), viaSQL(id)
			if before == after {
				require.Equal(t, before, api, "run %d: plain SQL on cairn.runs and GET /api/runs/%d", id, id)
				break
			}
			require.True(t, time.Now().Before(deadline), "run %d kept moving for 10s: %s, then %s", id, before, after)
			time.Sleep(10 * time.Millisecond) // poll interval while a process still writes the run
		}
	}
}
