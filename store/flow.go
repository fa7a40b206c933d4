package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Flow control. A task declared with a concurrency limit carries a
// conc_key, one with a rate limit a rate_key (see FlowKey); the limits
// live on the key's flow_keys row, written at enqueue. The two ways into
// running, a claim and a resume, lock the key's row (claims with SKIP
// LOCKED: a key another claim holds waits for the next claim) and take
// only the room it shows:
//
//   - concurrency: max_running minus the key's running tasks. They are
//     counted in the statement's snapshot, which may predate the lock;
//     so every claim and resume also adds its count to the row's claims
//     counter, and the difference between the counter's latest value
//     (the locked row) and its value in the snapshot is added: the
//     moves into running committed in between. A task leaving running
//     meanwhile is still counted (the check errs on the safe side), and
//     the ways out of running write no key row.
//   - rate: rate_limit minus the starts recorded on the row since
//     now() - Per (counted without an upper bound, so a start recorded
//     by a transaction that began later still counts; with the row
//     locked, every start is checked against all those recorded before
//     it, and no window of length Per can hold more than rate_limit).
//
// Keyed ready tasks are claimed round-robin across key values (each
// key's first tasks before any key's next; unkeyed tasks take turns as
// one more key), priority first.

// FlowKey is a stored flow-control key: kind ('c' concurrency, 'r' rate),
// group and value joined by U+001F, which a group cannot contain.
func FlowKey(kind byte, group, value string) string {
	return string(kind) + "\x1f" + group + "\x1f" + value
}

// SplitFlowKey returns a stored key's group and value.
func SplitFlowKey(key string) (group, value string) {
	parts := strings.SplitN(key, "\x1f", 3)
	if len(parts) != 3 {
		return "", key
	}
	return parts[1], parts[2]
}

// FlowKeyPruneMinIdle is the least idle time FlowKeyPrune takes: it
// must be longer than any transaction that enqueues stays open, plus the
// hour between two marks of a key in use (see below).
const FlowKeyPruneMinIdle = 2 * time.Hour

// FlowKeyPrune deletes up to batch flow_keys rows that no task refers to
// (in any state) and that no enqueue or rate-limited claim has marked
// used for idle (at least FlowKeyPruneMinIdle), and returns how many it
// deleted. Without it the table keeps a row for every key value ever
// enqueued.
//
// It reads all of tasks once (no index covers a key in every state), so
// callers run it seldom: the engine's pruner runs it every six hours,
// once across the cluster.
//
// Why a key an enqueue is using is never deleted: the enqueue marks a
// key row idle for over an hour (updated_at), locking it until commit,
// before it inserts the keys it lacks (sql/run_insert.sql). The delete, in a
// statement after the read of tasks, skips locked rows and checks the
// mark on each row's latest version. So an enqueue whose tasks the read
// of tasks could not see has either marked the row (still locked: left
// alone; committed: no longer idle), or found it deleted and inserted it
// again; one that found the row marked within the hour cannot be working
// on an idle key unless it has been open for idle minus an hour.
// Terminal tasks count as referring to their keys, so a retried task
// finds its key. A deleted key's row comes back, with claims at 0, the
// next time a task with that key is enqueued.
func (s *Store) FlowKeyPrune(ctx context.Context, idle time.Duration, batch int) (int64, error) {
	if idle < FlowKeyPruneMinIdle {
		return 0, fmt.Errorf("prune flow keys: idle %s is under the least, %s", idle, FlowKeyPruneMinIdle)
	}
	if batch <= 0 {
		return 0, fmt.Errorf("prune flow keys: batch %d is not positive", batch)
	}
	var idleKeys, used []string
	if err := s.raw(`SELECT key FROM ?schema.flow_keys WHERE updated_at < statement_timestamp() - ? * interval '1 millisecond'
		ORDER BY updated_at LIMIT ?`, idle.Milliseconds(), batch).Scan(ctx, &idleKeys); err != nil {
		return 0, fmt.Errorf("prune flow keys: find idle keys: %w", err)
	}
	if len(idleKeys) == 0 {
		return 0, nil
	}
	// One pass over tasks. The keys go into the statement's text, so the
	// test against them is a hash probe (a constant array), not a walk of
	// the array for each task.
	if err := s.raw(`SELECT DISTINCT k FROM (
		SELECT t.conc_key, t.rate_key FROM ?schema.tasks t
		WHERE t.fair_key IS NOT NULL AND (t.conc_key = ANY(?0::text[]) OR t.rate_key = ANY(?0::text[]))
	) t CROSS JOIN LATERAL unnest(ARRAY[t.conc_key, t.rate_key]) k WHERE k = ANY(?0::text[])`, pgArray(idleKeys)).Scan(ctx, &used); err != nil {
		return 0, fmt.Errorf("prune flow keys: find keys in use: %w", err)
	}
	inUse := make(map[string]bool, len(used))
	for _, k := range used {
		inUse[k] = true
	}
	idleKeys = slices.DeleteFunc(idleKeys, func(k string) bool { return inUse[k] })
	if len(idleKeys) == 0 {
		return 0, nil
	}
	res, err := s.exec(ctx, `
DELETE FROM ?schema.flow_keys f WHERE f.key IN (
	SELECT key FROM ?schema.flow_keys
	WHERE key = ANY(?::text[]) AND updated_at < statement_timestamp() - ? * interval '1 millisecond'
	FOR UPDATE SKIP LOCKED
)`, pgArray(idleKeys), idle.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("prune flow keys: delete %d idle keys: %w", len(idleKeys), err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
