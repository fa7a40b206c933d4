package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"
	"github.com/uptrace/bun"
)

// How task_events is indexed by task (see 023_history_brin). The
// partitions still written to have a BRIN index on task_id only, which
// costs nothing per event; once a partition's day is over, its B-tree by
// task is built in one pass. HistoryPartitionIndex builds those B-trees
// and HistorySummarize keeps the BRIN indexes of the open partitions
// summarized (a range of pages not yet summarized matches every lookup).

// historyTaskIndex is the name of the B-tree by task of a partition.
func historyTaskIndex(partition string) string { return partition + "_task" }

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
	var now time.Time
	if err := s.raw(`SELECT now()`).Scan(ctx, &now); err != nil {
		return nil, err
	}
	parts, err := s.HistoryPartitionList(ctx)
	if err != nil {
		return nil, err
	}
	var due []string
	for _, p := range parts {
		if p.Default || (p.To != nil && !p.To.After(now)) {
			due = append(due, p.Name)
		}
	}
	if len(due) == 0 {
		return nil, nil
	}
	// The state of each one's index: absent, valid, or invalid (a
	// concurrent build that did not finish).
	var have []struct {
		Name  string `bun:"relname"`
		Valid bool   `bun:"indisvalid"`
	}
	names := make([]string, len(due))
	for i, p := range due {
		names[i] = historyTaskIndex(p)
	}
	if err := s.raw(`
SELECT c.relname, x.indisvalid FROM pg_class c JOIN pg_index x ON x.indexrelid = c.oid
WHERE c.relnamespace = ?::regnamespace AND c.relname IN (?)`, s.schema, bun.In(names)).Scan(ctx, &have); err != nil {
		return nil, err
	}
	valid := map[string]bool{}
	for _, h := range have {
		valid[h.Name] = h.Valid
	}
	var built []string
	for i, p := range due {
		idx := names[i]
		ok, exists := valid[idx]
		if ok {
			continue
		}
		if exists {
			if _, err := s.exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS ?schema.?`, bun.Ident(idx)); err != nil {
				return built, fmt.Errorf("drop invalid %s: %w", idx, err)
			}
		}
		if _, err := s.exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS ? ON ?schema.? (task_id, id)`, bun.Ident(idx), bun.Ident(p)); err != nil {
			return built, fmt.Errorf("build %s: %w", idx, err)
		}
		built = append(built, idx)
	}
	return built, nil
}

// historySummarizeLockTimeout bounds HistorySummarize's wait for a
// partition's lock, which an autovacuum of the partition holds (and
// which summarizes the ranges itself).
const historySummarizeLockTimeout = "1s"

// HistorySummarize summarizes the new page ranges of the BRIN indexes on
// task_id of the open partitions of task_events (those whose day is not
// over or ended within the hour, and began by the next hour), and
// returns how many ranges it summarized. The BRIN on at is left to
// autovacuum: a read of a recent window of time reads the pages not yet
// summarized anyway, while a task's events are a few rows among them. Processes of one schema take turns; one
// that finds the lock taken, or a partition locked by an autovacuum,
// returns 0 without an error.
func (s *Store) HistorySummarize(ctx context.Context) (int64, error) {
	var n int64
	err := s.InTx(ctx, func(tx *Store) error {
		var took bool
		if err := tx.raw(`SELECT pg_try_advisory_xact_lock(?)`, s.lockKey("history-summarize")).Scan(ctx, &took); err != nil || !took {
			return err
		}
		if _, err := tx.exec(ctx, `SET LOCAL lock_timeout = '`+historySummarizeLockTimeout+`'`); err != nil {
			return err
		}
		return tx.raw(`
SELECT coalesce(sum(brin_summarize_new_values(x.indexrelid::regclass)), 0)
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) b
JOIN pg_index x ON x.indrelid = c.oid
JOIN pg_class ic ON ic.oid = x.indexrelid
JOIN pg_am am ON am.oid = ic.relam
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = x.indkey[0]
WHERE i.inhparent = to_regclass(?) AND am.amname = 'brin' AND a.attname = 'task_id' AND b <> 'DEFAULT'
	AND (regexp_match(b, 'TO \(''([^'']+)''\)'))[1]::timestamptz > now() - interval '1 hour'
	AND (regexp_match(b, 'FROM \(''([^'']+)''\)'))[1]::timestamptz <= now() + interval '1 hour'`,
			s.schema+".task_events").Scan(ctx, &n)
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
