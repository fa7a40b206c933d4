package benchdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func setup(t *testing.T) (*pgtest.DB, *benchdb.DB) {
	t.Helper()
	db := pgtest.New(t)
	q, err := benchdb.New(db.SQL, pgtest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	return db, q
}

func TestSeedFinished(t *testing.T) {
	t.Parallel()
	db, q := setup(t)
	ctx := context.Background()
	for from := 0; from < 7; from += 4 {
		err := q.SeedFinished(ctx, benchdb.FinishedParams{From: from, Count: min(4, 7-from), Total: 7, Span: 24 * time.Hour,
			Workflow: "noop", Task: "t", Queue: "default"})
		if err != nil {
			t.Fatal(err)
		}
	}
	var runs, doneRuns, tasks, events, claims, completions, counted int64
	err := db.SQL.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM cairn.runs),
		(SELECT count(*) FROM cairn.runs WHERE status = 'completed' AND task_count = 1 AND done_tasks = 1 AND finished_at IS NOT NULL),
		(SELECT count(*) FROM cairn.tasks WHERE status = 'completed' AND workflow = 'noop' AND name = 't' AND queue = 'default'),
		(SELECT count(*) FROM cairn.task_events),
		(SELECT count(*) FROM cairn.task_events WHERE from_status = 'ready' AND to_status = 'running'),
		(SELECT count(*) FROM cairn.task_events WHERE from_status = 'running' AND to_status = 'completed'),
		(SELECT coalesce(sum(tasks), 0) FROM cairn.cairn_task_counts WHERE workflow = 'noop' AND status = 'completed')`).
		Scan(&runs, &doneRuns, &tasks, &events, &claims, &completions, &counted)
	if err != nil {
		t.Fatal(err)
	}
	if runs != 7 || doneRuns != 7 || tasks != 7 || events != 21 || claims != 7 || completions != 7 || counted != 7 {
		t.Fatalf("seeded runs %d (completed %d), tasks %d, events %d (claims %d, completions %d), counted %d; want 7, 7, 7, 21, 7, 7, 7",
			runs, doneRuns, tasks, events, claims, completions, counted)
	}
	var oldest time.Time
	if err := db.SQL.QueryRowContext(ctx, `SELECT min(created_at) FROM cairn.runs`).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if age := time.Since(oldest); age < 20*time.Hour || age > 25*time.Hour {
		t.Errorf("oldest run %s old, want about the 24h span", age)
	}
	if err := q.VacuumAnalyze(ctx); err != nil {
		t.Fatal(err)
	}

	// The window and count above a floor leave the history out.
	floor, err := q.MaxTaskID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := q.EventWindowAfter(ctx, floor); err != nil || w.Completed != 0 {
		t.Fatalf("window above the floor = %+v, %v; want nothing", w, err)
	}
	if w, err := q.EventWindowAfter(ctx, 0); err != nil || w.Completed != 7 || !w.First.Before(w.Last) {
		t.Fatalf("window of everything = %+v, %v; want 7 completions", w, err)
	}
	if n, err := q.CountCompletedAfter(ctx, floor-2); err != nil || n != 2 {
		t.Fatalf("completed above floor-2 = %d, %v; want 2", n, err)
	}
	if err := q.SeedFinished(ctx, benchdb.FinishedParams{Count: 0, Total: 7}); err == nil {
		t.Error("a chunk of 0 runs was accepted")
	}
}

func TestHoldSnapshot(t *testing.T) {
	t.Parallel()
	db, q := setup(t)
	ctx := context.Background()
	if err := q.SeedFinished(ctx, benchdb.FinishedParams{Count: 100, Total: 100, Span: time.Hour,
		Workflow: "noop", Task: "t", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	snap, err := q.HoldSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite every task row while the snapshot is held, in a few
	// transactions: vacuum may remove none of the old versions. One
	// connection, whose statistics are flushed before each VACUUM, so
	// that none of its counts arrive after a VACUUM's.
	conn, err := db.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(stmt string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for range 3 {
		exec(`UPDATE cairn.tasks SET updated_at = now()`)
	}
	age, err := q.XminAge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if age < 3 {
		t.Errorf("xmin age with the snapshot held = %d, want at least the 3 transactions since", age)
	}
	exec(`SELECT pg_stat_force_next_flush()`)
	exec(`VACUUM cairn.tasks`)
	held, err := q.TableStats(ctx, "tasks")
	if err != nil {
		t.Fatal(err)
	}
	if held.Dead < 300 {
		t.Errorf("dead tuples of tasks after VACUUM with the snapshot held = %d, want the 300 old versions kept", held.Dead)
	}
	if err := snap.Release(); err != nil {
		t.Fatal(err)
	}
	exec(`VACUUM cairn.tasks`)
	after, err := q.TableStats(ctx, "tasks")
	if err != nil {
		t.Fatal(err)
	}
	if after.Dead != 0 {
		t.Errorf("dead tuples of tasks after VACUUM with the snapshot released = %d, want 0", after.Dead)
	}
	// A partitioned table's stats are its partitions'.
	exec(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, attempt)
		SELECT run_id, id, 'ready', 'running', 1 FROM cairn.tasks`)
	events, err := q.TableStats(ctx, "task_events")
	if err != nil {
		t.Fatal(err)
	}
	if events.Bytes == 0 {
		t.Errorf("task_events (partitioned) has %d bytes, want its partitions' size", events.Bytes)
	}

	// The claim index, with pgstattuple (the private cluster's user is a
	// superuser) and without.
	stattuple := q.EnablePgstattuple(ctx)
	ix, err := q.IndexStats(ctx, "tasks_claim", stattuple)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Bytes <= 0 || (stattuple && ix.Entries != 0) || (!stattuple && ix.Entries != -1) {
		t.Errorf("claim index = %+v (pgstattuple %v), want a size and no entries: no task is ready", ix, stattuple)
	}
	if _, err := q.IndexStats(ctx, "tasks_claim; DROP TABLE x", false); err == nil {
		t.Error("a bad index name was accepted")
	}
}

// Seed writes chains of tasks that their runs list in idx order (see
// migration 022).
func TestSeedListsEachRunsTasks(t *testing.T) {
	t.Parallel()
	db, q := setup(t)
	ctx := context.Background()
	runs, tasks, events, err := q.Seed(ctx, benchdb.SeedParams{Tasks: 30, TasksPerRun: 3, Span: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 10 || tasks != 30 || events == 0 {
		t.Fatalf("seeded %d runs, %d tasks, %d events; want 10, 30 and some", runs, tasks, events)
	}
	var wrong int
	err = db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM cairn.runs r
		WHERE r.task_ids IS DISTINCT FROM ARRAY(SELECT t.id FROM cairn.tasks t WHERE t.run_id = r.id ORDER BY t.idx)
			OR cardinality(r.task_ids) <> 3`).Scan(&wrong)
	if err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Fatalf("%d runs do not list their tasks", wrong)
	}
}
