package benchdb_test

import (
	"context"
	"testing"
	"time"
)

// PruneByDelete deletes every old run with its task and events, batch
// after batch (each after the last run of the one before), and keeps
// the recent ones.
func TestPruneByDeleteTakesEveryBatch(t *testing.T) {
	t.Parallel()
	db, q := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, day := range []time.Time{now.Add(-72 * time.Hour), now.Add(-48 * time.Hour), now} {
		if err := q.SeedDay(ctx, day, 7, 7, nil); err != nil {
			t.Fatal(err)
		}
	}
	var keep int64
	if err := db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM cairn.runs WHERE finished_at >= now() - interval '24 hours'`).Scan(&keep); err != nil {
		t.Fatal(err)
	}
	before, err := q.RunsDeleted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := q.PruneByDelete(ctx, 24*time.Hour, 3)
	if err != nil {
		t.Fatal(err)
	}
	var runs, tasks, events int64
	err = db.SQL.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM cairn.runs), (SELECT count(*) FROM cairn.tasks),
		(SELECT count(*) FROM cairn.task_events)`).Scan(&runs, &tasks, &events)
	if err != nil {
		t.Fatal(err)
	}
	if n != 21-keep || runs != keep || tasks != keep || events != 2*keep {
		t.Fatalf("pruned %d runs, left %d runs, %d tasks, %d events; want %d pruned, %d, %d, %d left",
			n, runs, tasks, events, 21-keep, keep, keep, 2*keep)
	}
	// The statistics system counts them (RunsDeleted: the bench's
	// progress), within about a second.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := q.RunsDeleted(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after-before == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RunsDeleted went from %d to %d, want %d more", before, after, n)
		}
		time.Sleep(50 * time.Millisecond) // polling the statistics, bounded by the deadline
	}
}
