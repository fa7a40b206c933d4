package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/lib/pq"
	"github.com/uptrace/bun"
)

// How task_events is indexed by task (see 023_history_brin). The
// partitions still written to have a BRIN index on task_id only, which
// costs nothing per event; once a partition's day is over, its B-tree by
// task is built in one pass. HistoryPartitionIndex builds those B-trees
// and HistorySummarize keeps the BRIN indexes of the open partitions
// summarized (a range of pages not yet summarized matches every lookup).

// historyTaskIndexSuffix makes the name of the B-tree by task of a
// partition from the partition's.
const historyTaskIndexSuffix = "_task"

// HistoryPartitionIndex builds the B-tree by task, (task_id, id), of each
// partition of task_events whose day is over by the database's clock, and
// of the DEFAULT partition, where it is missing, and returns the indexes
// it built. Each is built with CREATE INDEX CONCURRENTLY: inserts go on
// meanwhile (a late event of the day is still indexed). An index a
// cancelled build left invalid is dropped and built again. Processes of
// one schema take turns: while one builds, the others return at once
// with nothing built.
func (s *Store) HistoryPartitionIndex(ctx context.Context) ([]string, error) {
	var built []string
	_, err := s.sessionLocked(ctx, "history-index", nil, func(p *Store) error {
		var err error
		built, err = p.historyPartitionIndex(ctx)
		return err
	})
	if err != nil {
		return built, fmt.Errorf("index history partitions: %w", err)
	}
	return built, nil
}

func (s *Store) historyPartitionIndex(ctx context.Context) ([]string, error) {
	// The partitions due and the state of their index: absent (NULL) or
	// invalid (a concurrent build that did not finish).
	var due []struct {
		Name  string `bun:"name"`
		Valid *bool  `bun:"valid"`
	}
	if err := s.raw(`
SELECT p.name, x.indisvalid AS valid FROM (
	SELECT c.oid, c.relname AS name, b = 'DEFAULT' AS is_default,
		(regexp_match(b, 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
		(regexp_match(b, 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
	FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid
	CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) b
	WHERE i.inhparent = to_regclass(?)
) p
LEFT JOIN pg_class ic ON ic.relnamespace = ?::regnamespace AND ic.relname = p.name || ?
LEFT JOIN pg_index x ON x.indexrelid = ic.oid
WHERE (p.is_default OR p.hi <= now()) AND x.indisvalid IS NOT TRUE
ORDER BY p.name`, s.schema+".task_events", s.schema, historyTaskIndexSuffix).Scan(ctx, &due); err != nil {
		return nil, err
	}
	var built []string
	for _, p := range due {
		idx := p.Name + historyTaskIndexSuffix
		if p.Valid != nil {
			if _, err := s.exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS ?schema.?`, bun.Ident(idx)); err != nil {
				return built, fmt.Errorf("drop invalid %s: %w", idx, err)
			}
		}
		if _, err := s.exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS ? ON ?schema.? (task_id, id)`, bun.Ident(idx), bun.Ident(p.Name)); err != nil {
			return built, fmt.Errorf("build %s: %w", idx, err)
		}
		built = append(built, idx)
	}
	return built, nil
}

// historySummarizeLockTimeout bounds HistorySummarize's wait for a
// partition's lock, which an autovacuum of the partition holds (and
// which summarizes the ranges itself).
const historySummarizeLockTimeout = `SET LOCAL lock_timeout = '1s'`

// HistorySummarize summarizes the new page ranges of the BRIN indexes on
// task_id of the open partitions of task_events (those whose day is not
// over or ended within the hour, and began by the next hour), and
// returns how many ranges it summarized. The BRIN on at is left to
// autovacuum: a read of a recent window of time reads the pages not yet
// summarized anyway, while a task's events are a few rows among them.
// Processes of one schema take turns; one that finds the lock taken, or
// a partition locked by an autovacuum, returns 0 without an error.
func (s *Store) HistorySummarize(ctx context.Context) (int64, error) {
	var n int64
	err := s.InTx(ctx, func(tx *Store) error {
		var took bool
		if err := tx.raw(`SELECT pg_try_advisory_xact_lock(?)`, s.lockKey("history-summarize")).Scan(ctx, &took); err != nil || !took {
			return err
		}
		if _, err := tx.exec(ctx, historySummarizeLockTimeout); err != nil {
			return err
		}
		// The BRIN on task_id of a partition is a child of the parent's
		// task_events_task_brin (see 023_history_brin).
		return tx.raw(`
SELECT coalesce(sum(brin_summarize_new_values(xi.inhrelid::regclass)), 0)
FROM (
	SELECT c.oid, c.relname AS name, b = 'DEFAULT' AS is_default,
		(regexp_match(b, 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
		(regexp_match(b, 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
	FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid
	CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) b
	WHERE i.inhparent = to_regclass(?)
) p
JOIN pg_index x ON x.indrelid = p.oid
JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid AND xi.inhparent = to_regclass(?)
WHERE NOT p.is_default AND p.hi > now() - interval '1 hour' AND p.lo <= now() + interval '1 hour'`,
			s.schema+".task_events", s.schema+".task_events_task_brin").Scan(ctx, &n)
	})
	var pe *pq.Error
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("summarize history indexes: %w", err)
	}
	return n, nil
}
