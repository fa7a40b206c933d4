package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/uptrace/bun"
)

// This file holds the partitions of task_events (see 017_history_partitions):
// one per UTC day, named task_events_YYYYMMDD, and a DEFAULT partition that
// takes any row no other partition covers. The engine creates the next
// days' partitions ahead and drops whole partitions past the retention.
// Both take one advisory lock per schema, so several engines take turns,
// and a lock timeout, so that the hot path (which inserts events) never
// waits long behind them.

// HistoryPartition is one partition of task_events.
type HistoryPartition struct {
	Name string `bun:"name"`
	// From and To bound the partition's range of at: From <= at < To.
	// From is nil for a range open below (MINVALUE), To for one open
	// above; both are nil for the DEFAULT partition.
	From    *time.Time `bun:"lo"`
	To      *time.Time `bun:"hi"`
	Default bool       `bun:"is_default"`
}

// HistoryPartitionDropped is one partition dropped by HistoryPartitionDrop.
type HistoryPartitionDropped struct {
	Name string
	// Kept is how many of its events were copied back (into the DEFAULT
	// partition) because their run is kept.
	Kept int64
}

// historyLockTimeout bounds the wait for the locks that creating and
// dropping partitions take: the statements of the hot path queue behind
// a waiting lock request, so it gives up early and the next pass retries.
const historyLockTimeout = `SET LOCAL lock_timeout = '5s'`

// historyRunMargin widens the runs looked at when a partition is dropped:
// a run is created by its own transaction, and another one that started a
// moment before can stamp an event of it with an earlier time.
const historyRunMargin = time.Hour

// lockKey is the advisory lock of this schema called name: "history"
// for partition changes, "vacuum" for VacuumHot.
func (s *Store) lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("cairn-" + name + ":" + s.schema))
	return int64(h.Sum64() >> 1)
}

// HistoryDayName is the name of the partition of the UTC day of t.
func HistoryDayName(t time.Time) string {
	return "task_events_" + t.UTC().Format("20060102")
}

// HistoryPartitionList lists the partitions of task_events, in range order
// (the DEFAULT partition last). p lists the partitions of the table its
// argument names: oid, name, is_default, and the bounds of the range, lo
// and hi (NULL for MINVALUE or MAXVALUE, and for the DEFAULT partition);
// HistoryPartitionIndex and HistorySummarize read them the same way.
func (s *Store) HistoryPartitionList(ctx context.Context) ([]HistoryPartition, error) {
	var out []HistoryPartition
	err := s.raw(`SELECT name, lo, hi, is_default FROM (
	SELECT c.oid, c.relname AS name, b = 'DEFAULT' AS is_default,
		(regexp_match(b, 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
		(regexp_match(b, 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
	FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid
	CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) b
	WHERE i.inhparent = to_regclass(?)
) p
ORDER BY is_default, lo NULLS FIRST`, s.schema+".task_events").Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list history partitions: %w", err)
	}
	return out, nil
}

// covers reports whether p's range meets [from, to).
func (p HistoryPartition) covers(from, to time.Time) bool {
	if p.Default {
		return false
	}
	return (p.From == nil || p.From.Before(to)) && (p.To == nil || p.To.After(from))
}

// lockHistory takes the schema's partition lock for the transaction and
// bounds its waits for table locks.
func (s *Store) lockHistory(ctx context.Context) error {
	if _, err := s.exec(ctx, `SELECT pg_advisory_xact_lock(?)`, s.lockKey("history")); err != nil {
		return fmt.Errorf("lock history partitions: %w", err)
	}
	if _, err := s.exec(ctx, historyLockTimeout); err != nil {
		return fmt.Errorf("set lock timeout: %w", err)
	}
	return nil
}

// HistoryPartitionEnsure makes sure a partition covers each UTC day of
// days days starting with the day of from, creating the missing daily
// partitions, and returns the names it created. Rows the DEFAULT partition
// holds for a day it creates (written while the day had no partition) are
// moved into the new partition in the same transaction. Safe to call from
// several engines at once; each day is its own transaction.
func (s *Store) HistoryPartitionEnsure(ctx context.Context, from time.Time, days int) ([]string, error) {
	var created []string
	day := from.UTC().Truncate(24 * time.Hour)
	for range days {
		next := day.Add(24 * time.Hour)
		var made bool
		err := s.InTx(ctx, func(tx *Store) error {
			var err error
			made, err = tx.historyPartitionCreate(ctx, day, next)
			return err
		})
		if err != nil {
			return created, fmt.Errorf("create history partition %s: %w", HistoryDayName(day), err)
		}
		if made {
			created = append(created, HistoryDayName(day))
		}
		day = next
	}
	return created, nil
}

// historyPartitionCreate creates the partition of [from, to) unless a
// partition meets that range, in the caller's transaction.
func (s *Store) historyPartitionCreate(ctx context.Context, from, to time.Time) (bool, error) {
	if err := s.lockHistory(ctx); err != nil {
		return false, err
	}
	parts, err := s.HistoryPartitionList(ctx)
	if err != nil {
		return false, err
	}
	if len(parts) == 0 {
		return false, fmt.Errorf("task_events is not partitioned: %w", ErrNotMigrated)
	}
	var def string
	for _, p := range parts {
		if p.covers(from, to) {
			return false, nil
		}
		if p.Default {
			def = p.Name
		}
	}
	name := bun.Ident(HistoryDayName(from))
	// Made apart and attached, rather than CREATE ... PARTITION OF, which
	// locks the parent against every insert while it runs: ATTACH takes
	// a weaker lock on the parent (inserts go on), and an exclusive one
	// on the DEFAULT partition only.
	if _, err := s.exec(ctx, `CREATE TABLE ?schema.? (LIKE ?schema.task_events INCLUDING DEFAULTS)`, name); err != nil {
		return false, err
	}
	if def != "" {
		// Rows of this day in the DEFAULT partition move to the new one:
		// ATTACH refuses a range that the DEFAULT partition has rows of.
		// The lock keeps new ones from arriving meanwhile.
		if _, err := s.exec(ctx, `LOCK TABLE ?schema.? IN EXCLUSIVE MODE`, bun.Ident(def)); err != nil {
			return false, err
		}
		if _, err := s.exec(ctx, `
WITH moved AS (DELETE FROM ?schema.? WHERE at >= ? AND at < ? RETURNING *)
INSERT INTO ?schema.? SELECT * FROM moved`, bun.Ident(def), from, to, name); err != nil {
			return false, err
		}
	}
	if _, err := s.exec(ctx, `ALTER TABLE ?schema.task_events ATTACH PARTITION ?schema.? FOR VALUES FROM (?) TO (?)`, name, from, to); err != nil {
		return false, err
	}
	return true, nil
}

// HistoryPartitionDrop detaches and drops every partition whose range
// ended more than olderThan ago by the database's clock, and returns them.
// Events of runs that RunPrune keeps (not finished, finished since the
// cutoff, or in their uniqueness window) are never lost: in the
// transaction that detaches and drops a partition, they are first copied
// back into task_events, where the DEFAULT partition takes them (no other
// partition covers their time any more); the pruner deletes them with
// their run. A failure leaves the partition as it was.
func (s *Store) HistoryPartitionDrop(ctx context.Context, olderThan time.Duration) ([]HistoryPartitionDropped, error) {
	var out []HistoryPartitionDropped
	for {
		var d HistoryPartitionDropped
		err := s.InTx(ctx, func(tx *Store) error {
			var err error
			d, err = tx.historyPartitionDropOne(ctx, olderThan)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("drop history partition: %w", err)
		}
		if d.Name == "" {
			return out, nil
		}
		out = append(out, d)
	}
}

// historyPartitionDropOne drops the oldest partition past the cutoff, if
// any, in the caller's transaction.
func (s *Store) historyPartitionDropOne(ctx context.Context, olderThan time.Duration) (HistoryPartitionDropped, error) {
	if err := s.lockHistory(ctx); err != nil {
		return HistoryPartitionDropped{}, err
	}
	var cutoff time.Time
	if err := s.raw(`SELECT now() - ? * interval '1 millisecond'`, olderThan.Milliseconds()).Scan(ctx, &cutoff); err != nil {
		return HistoryPartitionDropped{}, fmt.Errorf("read cutoff: %w", err)
	}
	parts, err := s.HistoryPartitionList(ctx)
	if err != nil {
		return HistoryPartitionDropped{}, err
	}
	var old *HistoryPartition
	for _, p := range parts {
		if !p.Default && p.To != nil && !p.To.After(cutoff) {
			old = &p
			break
		}
	}
	if old == nil {
		return HistoryPartitionDropped{}, nil
	}
	name := bun.Ident(old.Name)
	// The events to keep are read first, before the partition is detached:
	// detaching locks task_events against every insert until the commit.
	// The runs whose events the partition can hold were created before its
	// end; those the pruner keeps keep their events. Walked from the runs
	// (runs_created), their tasks and the partition's index by task, not
	// by reading the whole partition. No event is added to the partition
	// meanwhile: its time is past.
	// Without JIT: see RunListFiltered.
	if err := s.withoutJIT(ctx, false, func(tx *Store) error {
		_, err := tx.exec(ctx, `
CREATE TEMP TABLE cairn_kept_events ON COMMIT DROP AS
SELECT e.* FROM ?schema.? e
WHERE e.task_id IN (
	SELECT t.id FROM ?schema.runs r JOIN ?schema.run_rows rt ON rt.id = r.id JOIN ?schema.tasks t ON t.id = ANY(rt.task_ids)
	WHERE r.created_at < ?
		AND (r.finished_at IS NULL OR r.finished_at >= ? OR r.unique_until > now()))`,
			name, old.To.Add(historyRunMargin), cutoff)
		return err
	}); err != nil {
		return HistoryPartitionDropped{}, fmt.Errorf("read events of kept runs from %s: %w", old.Name, err)
	}
	if _, err := s.exec(ctx, `ALTER TABLE ?schema.task_events DETACH PARTITION ?schema.?`, name); err != nil {
		return HistoryPartitionDropped{}, fmt.Errorf("detach %s: %w", old.Name, err)
	}
	// Copied back once detached (no partition covers their time now: the
	// DEFAULT one takes them), except those of a run pruned meanwhile
	// (the pruner's statements have finished: they take a lock that
	// conflicts with the detach's).
	res, err := s.exec(ctx, `
INSERT INTO ?schema.task_events
SELECT k.* FROM pg_temp.cairn_kept_events k WHERE EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = k.run_id)`)
	if err != nil {
		return HistoryPartitionDropped{}, fmt.Errorf("keep events of live runs from %s: %w", old.Name, err)
	}
	kept, _ := res.RowsAffected()
	if _, err := s.exec(ctx, `DROP TABLE pg_temp.cairn_kept_events`); err != nil { // for the next partition in a caller's transaction
		return HistoryPartitionDropped{}, err
	}
	if _, err := s.exec(ctx, `DROP TABLE ?schema.?`, name); err != nil {
		return HistoryPartitionDropped{}, fmt.Errorf("drop %s: %w", old.Name, err)
	}
	return HistoryPartitionDropped{Name: old.Name, Kept: kept}, nil
}
