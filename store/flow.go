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

func (s *Store) keyedClaimQuery(limit int) string {
	return s.query(limitName("TaskClaimKeyed", limit))
}

// taskClaimKeyed is TaskClaim for a worker that may claim keyed tasks.
func (s *Store) taskClaimKeyed(ctx context.Context, p ClaimParams, total int) ([]Claimed, error) {
	after := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		after[i] = p.After[q]
	}
	var notified int
	rows := &claimedRows{out: p.Buf[:0], tail: []string{"after_key", "notified"}}
	rows.tailDest = []any{column{&rows.cur.AfterKey}, column{&notified}}
	err := s.InTx(ctx, func(tx *Store) error {
		// 3 ms of planning saved on a 1 ms claim: the claim is the last
		// statement of its transaction.
		if err := tx.genericPlans(ctx); err != nil {
			return err
		}
		fp, fa := p.floorArgs()
		rows.out = rows.out[:0] // a retried transaction reads again
		return tx.scanPrepared(ctx, rows, tx.keyedClaimQuery(limitBucket(total)), pgArray(p.Queues), pgArray(p.Limits), fp, fa, p.keyedFloorArgs(), p.WorkerID,
			pgArray(after), p.WorkerID, p.Lease.Milliseconds(),
			tx.EventsChannel(), tx.ReadyChannel(), tx.ControlChannel(), false)
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return rows.out, nil
}

// TaskKeyedFloor reads where the keyed claims of queue by workerID can
// start (see ClaimParams.KeyedFloors): the least available_at of the keyed
// ready tasks they could take, from from on (zero: from the start), or
// the database's now() if that is earlier.
//
// Keyed claims take turns across keys, so no claim knows that the keys it
// did not visit hold nothing older: their floor comes from this read
// alone. It reads every index entry of the queue's keyed ready tasks
// (those below from without a heap visit), so callers space it out. A
// read from a floor raises it past the tasks claimed since; one from the
// start also finds a task made ready below the floor (a run resumed, a
// transaction that committed long after it began, a claim rolled back).
func (s *Store) TaskKeyedFloor(ctx context.Context, queue string, workerID int64, from time.Time) (time.Time, error) {
	var at []time.Time
	if err := s.scanPrepared(ctx, &at, s.query("TaskKeyedFloor"), queue, workerID, floorMicros(from)); err != nil {
		return time.Time{}, fmt.Errorf("read the keyed claim floor of queue %q: %w", queue, err)
	}
	return at[0], nil
}

// TaskResumeKeyed moves a deferred task held by workerID that has a
// concurrency key back to running, if its key has room: the key's row is
// locked first (waiting for it) and read on its latest version. It
// reports whether the task moved and, when not, whether it was for lack
// of room (false: the row is no longer this attempt's deferred row).
func (s *Store) TaskResumeKeyed(ctx context.Context, workerID int64, task ResumeTask, lease time.Duration) (moved, full bool, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		// The lock first; the count in a statement of its own, whose
		// snapshot sees every claim and resume of the key committed
		// before the lock was granted.
		var key []string
		if err := tx.raw(`SELECT f.key FROM ?schema.flow_keys f
			WHERE f.key = (SELECT conc_key FROM ?schema.tasks WHERE id = ?) FOR UPDATE`, task.ID).Scan(ctx, &key); err != nil {
			return err
		}
		if len(key) == 1 {
			var room int
			if err := tx.raw(`SELECT f.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = f.key AND t.status = 'running')::int
				FROM ?schema.flow_keys f WHERE f.key = ?`, key[0]).Scan(ctx, &room); err != nil {
				return err
			}
			if room <= 0 {
				full = true
				return nil
			}
		}
		m, err := tx.Transition(ctx, TransitionParams{From: []string{StatusDeferred}, WorkerID: workerID,
			Items: []TransitionItem{{TaskID: task.ID, To: StatusRunning, Attempt: task.Attempt, LeaseMs: lease.Milliseconds()}}})
		moved = len(m) > 0
		if err != nil || !moved || len(key) == 0 {
			return err
		}
		// Claims that read the count in a snapshot from before this
		// commit learn of the move from the counter (see above).
		_, err = tx.exec(ctx, `UPDATE ?schema.flow_keys SET claims = claims + 1 WHERE key = ?`, key[0])
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("resume keyed task %d: %w", task.ID, err)
	}
	return moved, full, nil
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
// before it inserts the keys it lacks (runInsertSQL). The delete, in a
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
