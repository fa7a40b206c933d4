package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
)

// pruneBatch is the engine pruner's batch (runs per delete statement).
const pruneBatch = 1000

// prune seeds -prune-days days of finished history, -prune-per-day
// single-task runs a day (two events each), all past the retention, and
// prunes it twice in fresh databases: by dropping task_events partitions
// and deleting the runs and tasks (the engine's partitioner and pruner),
// and by deleting every row (the pruner before migration 017, on the same
// tables). Each way reports its time, the WAL it wrote, the dead tuples
// it left and the VACUUM that follows (the autovacuum work, with
// autovacuum off meanwhile).
func (b *bench) prune(ctx context.Context) error {
	days, perDay := b.o.pruneDays, b.o.prunePerDay
	ways := strings.Split(b.o.pruneWays, ",")
	for _, way := range ways {
		if way != "drop" && way != "delete" {
			return fmt.Errorf("-prune-ways: unknown way %q (drop, delete)", way)
		}
	}
	b.add("prune", "history", fmt.Sprintf("%d days × %d tasks (%d events)", days, perDay, 2*days*perDay), "", "")
	took := map[string]time.Duration{}
	wal := map[string]int64{}
	for _, way := range ways {
		r, err := b.pruneOnce(ctx, way, days, perDay)
		if err != nil {
			return fmt.Errorf("%s: %w", way, err)
		}
		took[way], wal[way] = r.took+r.vacuum, r.wal+r.vacuumWAL
	}
	if len(took) == 2 {
		b.add("prune", "drop vs delete, prune + vacuum", fmt.Sprintf("%.1f× faster, %.1f× less WAL",
			took["delete"].Seconds()/max(took["drop"].Seconds(), 1e-3), float64(wal["delete"])/float64(max(wal["drop"], 1))), "", "")
	}
	return nil
}

type pruneResult struct {
	took, vacuum   time.Duration
	wal, vacuumWAL int64
}

func (b *bench) pruneOnce(ctx context.Context, way string, days, perDay int) (pruneResult, error) {
	var r pruneResult
	s, drop, err := b.newDB(ctx, "prune_"+way)
	if err != nil {
		return r, err
	}
	defer drop()
	st, err := store.New(s.sql, schema)
	if err != nil {
		return r, err
	}
	// The history ends two days ago; a retention of one day prunes it all.
	first := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -days-1)
	if _, err := st.HistoryPartitionEnsure(ctx, first, days); err != nil {
		return r, err
	}
	start := time.Now()
	for d := range days {
		day := first.AddDate(0, 0, d)
		err := s.q.SeedDay(ctx, day, perDay, b.o.pruneChunk, func(done int) {
			b.log.Info("seeding", slog.String("scenario", "prune_"+way), slog.String("day", day.Format(time.DateOnly)),
				slog.Int("runs", done), slog.Int("of", perDay))
		})
		if err != nil {
			return r, err
		}
	}
	// The B-trees by task that the engine builds once a day is over.
	if _, err := st.HistoryPartitionIndex(ctx); err != nil {
		return r, err
	}
	if err := s.q.SetAutovacuum(ctx, false); err != nil {
		return r, err
	}
	if err := s.q.VacuumHistory(ctx, true); err != nil { // start clean: statistics, hint bits and visibility map set
		return r, err
	}
	if err := s.q.Checkpoint(ctx); err != nil {
		b.log.Warn("checkpoint before pruning (needs superuser or pg_checkpoint)", slog.Any("error", err))
	}
	_, before, err := s.q.DeadTuples(ctx)
	if err != nil {
		return r, err
	}
	b.add("prune", way+": seeded", fmt.Sprintf("%s in %s", mib(before), time.Since(start).Round(time.Second)), "", "")

	const retention = 24 * time.Hour
	lsn, err := s.q.WALPosition(ctx)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if way == "drop" {
		dropped, err := st.HistoryPartitionDrop(ctx, retention)
		if err != nil {
			return r, err
		}
		w, _ := s.q.WALSince(ctx, lsn)
		b.add("prune", way+": drop partitions", fmt.Sprintf("%d partitions in %s, WAL %s", len(dropped), time.Since(t0).Round(time.Millisecond), mib(w)), "", "")
	}
	t1 := time.Now()
	lsn1, _ := s.q.WALPosition(ctx)
	var n int64
	// Progress from the statistics system: the prune is one call.
	deleted0, _ := s.q.RunsDeleted(ctx)
	var deleted int64
	stop := b.progress(way+": prune runs", int64(days*perDay), func() int64 {
		if d, err := s.q.RunsDeleted(ctx); err == nil {
			deleted = d - deleted0
		}
		return deleted
	})
	if way == "drop" {
		n, err = st.RunPrune(ctx, retention, pruneBatch)
	} else {
		n, err = s.q.PruneByDelete(ctx, retention, pruneBatch)
	}
	stop()
	if err != nil {
		return r, err
	}
	if n != int64(days*perDay) {
		return r, fmt.Errorf("pruned %d runs, want %d", n, days*perDay)
	}
	w1, _ := s.q.WALSince(ctx, lsn1)
	b.add("prune", way+": delete runs + tasks"+map[bool]string{true: " + events", false: ""}[way == "delete"],
		fmt.Sprintf("%d runs in %s, WAL %s", n, time.Since(t1).Round(time.Millisecond), mib(w1)), "", "")
	r.took = time.Since(t0)
	if r.wal, err = s.q.WALSince(ctx, lsn); err != nil {
		return r, err
	}
	dead, size, err := s.q.DeadTuples(ctx)
	if err != nil {
		return r, err
	}
	b.add("prune", way+": prune total", fmt.Sprintf("%s, WAL %s", r.took.Round(time.Millisecond), mib(r.wal)), "", "")
	b.add("prune", way+": dead tuples after", fmt.Sprintf("runs %d, tasks %d, task_events %d (%s on disk)",
		dead["run_rows"], dead["tasks"], dead["task_events"], mib(size)), "", "")

	lsn2, _ := s.q.WALPosition(ctx)
	t2 := time.Now()
	if err := s.q.VacuumHistory(ctx, false); err != nil {
		return r, err
	}
	r.vacuum = time.Since(t2)
	r.vacuumWAL, _ = s.q.WALSince(ctx, lsn2)
	b.add("prune", way+": VACUUM after", fmt.Sprintf("%s, WAL %s", r.vacuum.Round(time.Millisecond), mib(r.vacuumWAL)), "", "")
	return r, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
