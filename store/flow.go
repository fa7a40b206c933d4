package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Flow control. A task declared with a concurrency limit carries a
// conc_key, one with a rate limit a rate_key (see FlowKey); the limits
// live on the key's flow_keys row, written at enqueue. The two ways into
// running, a claim and a resume, lock the key's row first, in a statement
// of their own, and then, in the next statement (whose snapshot sees
// every claim and resume committed before the lock was granted), take
// only the room it leaves:
//
//   - concurrency: max_running minus the key's running tasks, counted
//     (a task leaving running meanwhile is still counted: the check errs
//     on the safe side, and the ways out of running write no key row);
//   - rate: rate_limit minus the starts recorded on the row since
//     now() - Per (counted without an upper bound, so a start recorded
//     by a transaction that began later still counts; with the row
//     locked, every start is checked against all those recorded before
//     it, and no window of length Per can hold more than rate_limit).
//
// Keyed ready tasks are claimed round-robin across key values (each
// key's first task before any key's second; unkeyed tasks take turns as
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

// flowLockSQL locks, per queue asked, the rows of up to n keys with
// ready tasks, taken in turns from the queue's cursor among the first 2n
// such keys: a key another claim holds is skipped, and the next one
// taken instead, so that concurrent claims of one engine or many spread
// over the keys rather than queue on them. Claims never wait for a key
// (SKIP LOCKED), so they take keys in any order. Arguments: queues,
// limits, cursors.
const flowLockSQL = `
SELECT l.queue, l.key, l.ord
FROM unnest(?::text[], ?::int[], ?::text[]) AS q(name, n, after)
CROSS JOIN LATERAL (
	SELECT q.name AS queue, f.key, k.ord
	FROM ?schema.flow_ready_keys(q.name, q.after, 2 * q.n) WITH ORDINALITY AS k(key, ord)
	JOIN ?schema.flow_keys f ON f.key = k.key
	ORDER BY k.ord
	LIMIT q.n
	FOR UPDATE OF f SKIP LOCKED
) l
WHERE q.n > 0`

// keyedClaimCTEs are claimCTEs for a worker that may claim keyed tasks:
// q, cand and upd as there, cand made of unkeyed rows (as claimCTEs) and
// keyed ones of the keys flowLockSQL locked, within their room; and two
// more writes: the rate keys' new starts (rs_starts) and the held-back
// tasks of rate keys without room, whose available_at moves to when a
// start leaves the window (held). Arguments: queues, limits, worker id
// (handles), locked keys' queues, locked keys, worker id, lease ms.
const keyedClaimCTEs = `
q AS (` + claimQueues + `
), c0 AS (
	-- Unkeyed: as claimCTEs, ranked as one more key.
	SELECT q.name AS queue, c.ctid, c.priority, c.available_at, c.id,
		row_number() OVER (PARTITION BY q.name ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM q CROSS JOIN LATERAL (` + claimScan + `) c
), ks AS (
	-- The keys locked for this claim, with how many there are per queue.
	SELECT ks.queue, ks.key, q.n, q.handles, count(*) OVER (PARTITION BY ks.queue) AS nkeys
	FROM unnest(?::text[], ?::text[]) AS ks(queue, key) JOIN q ON q.name = ks.queue
), lk AS (
	-- The room of each (its row is locked by this transaction, so this
	-- snapshot sees its latest version).
	SELECT f.key,
		CASE WHEN f.max_running IS NOT NULL
		THEN f.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = f.key AND t.status = 'running')::int
		ELSE f.rate_limit - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')::int END AS room,
		(SELECT min(s) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')
			+ f.rate_per_ms * interval '1 millisecond' AS frees_at
	FROM ?schema.flow_keys f WHERE f.key IN (SELECT key FROM ks)
), kc AS (
	-- Per key, its first tasks that fit its room and its share of the
	-- batch (not locked yet).
	SELECT ks.queue, c.*, row_number() OVER (PARTITION BY c.fair_key ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM ks JOIN lk ON lk.key = ks.key
	CROSS JOIN LATERAL (
		SELECT t.ctid, t.priority, t.available_at, t.id, t.fair_key, t.conc_key, t.rate_key FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = ks.queue AND t.fair_key = ks.key
			AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.runs r WHERE r.id = t.run_id AND r.paused)
			AND (ks.handles IS NULL OR t.workflow || '.' || t.name = ANY(ks.handles))
		ORDER BY t.priority, t.available_at, t.id
		LIMIT least(ks.n, greatest(lk.room, 0), 2 * ((ks.n + ks.nkeys - 1) / ks.nkeys) + 1)
	) c
), lr AS (
	-- Rate keys of tasks limited by both a concurrency and a rate key:
	-- locked here (a key another claim holds is skipped) and read on
	-- their latest version.
	SELECT f.key, f.rate_limit - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')::int AS room
	FROM ?schema.flow_keys f
	WHERE f.key IN (SELECT rate_key FROM kc WHERE conc_key IS NOT NULL AND rate_key IS NOT NULL) AND f.key NOT IN (SELECT key FROM lk)
	ORDER BY f.key
	FOR UPDATE SKIP LOCKED
), rooms AS (
	SELECT key, room FROM lk UNION ALL SELECT key, room FROM lr
), kok AS (
	-- Keyed candidates within their rate key's room as well.
	SELECT x.queue, x.ctid, x.priority, x.available_at, x.id, x.rr FROM (
		SELECT kc.*, row_number() OVER (PARTITION BY kc.rate_key ORDER BY kc.priority, kc.available_at, kc.id) AS rn FROM kc
	) x
	WHERE x.rate_key IS NULL OR x.rn <= (SELECT min(room) FROM rooms WHERE rooms.key = x.rate_key)
), pick AS (
	-- Per queue, the first n by priority, then turn.
	SELECT y.ctid, y.keyed FROM (
		SELECT x.*, row_number() OVER (PARTITION BY x.queue ORDER BY x.priority, x.rr, x.available_at, x.id) AS pos FROM (
			SELECT queue, ctid, priority, available_at, id, rr, false AS keyed FROM c0
			UNION ALL
			SELECT queue, ctid, priority, available_at, id, rr, true FROM kok
		) x
	) y JOIN q ON q.name = y.queue
	WHERE y.pos <= q.n
), kl AS (
	-- The keyed picks, locked; one taken meanwhile is left out.
	SELECT t.ctid FROM ?schema.tasks t
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM pick WHERE keyed)) AND (t.status = 'ready') IS TRUE
	FOR UPDATE OF t SKIP LOCKED
), cand AS (
	SELECT ctid FROM pick WHERE NOT keyed
	UNION ALL
	SELECT ctid FROM kl
	LIMIT /*limit*/
), held AS (
	-- A rate key without room: its first tasks wait, ready, until a start
	-- leaves the window.
	UPDATE ?schema.tasks t SET available_at = h.frees_at, updated_at = now()
	FROM (
		SELECT c.ctid, lk.frees_at FROM ks JOIN lk ON lk.key = ks.key
		CROSS JOIN LATERAL (
			SELECT t.ctid FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = ks.queue AND t.fair_key = ks.key
				AND t.available_at < lk.frees_at
			ORDER BY t.priority, t.available_at, t.id
			LIMIT ks.n
			FOR UPDATE OF t SKIP LOCKED
		) c
		WHERE lk.room <= 0 AND lk.frees_at IS NOT NULL AND ks.key LIKE 'r%'
	) h
	WHERE t.ctid = h.ctid AND (t.status = 'ready') IS TRUE
), ` + claimUpdate + `, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), rs_starts AS (
	-- Each start counts against its rate key's window.
	UPDATE ?schema.flow_keys f SET updated_at = now(), starts = ARRAY(
		SELECT s FROM unnest(f.starts) s WHERE s > now() - 2 * f.rate_per_ms * interval '1 millisecond'
		UNION ALL
		SELECT now() FROM generate_series(1, a.n)
		ORDER BY 1)
	FROM (SELECT rate_key, count(*)::int AS n FROM upd WHERE rate_key IS NOT NULL GROUP BY rate_key) a
	WHERE f.key = a.rate_key
)`

// keyedClaimSQL is claimSQL over keyedClaimCTEs.
var keyedClaimSQL = claimStatement(keyedClaimCTEs, "")

func (s *Store) keyedClaimQuery(limit int) string {
	return s.limitQuery("keyedclaim", keyedClaimSQL, limit)
}

// taskClaimKeyed is TaskClaim for a worker that may claim keyed tasks: in
// one transaction, flowLockSQL locks the keys visited, then the claim
// takes unkeyed tasks and those keys' tasks within their room.
func (s *Store) taskClaimKeyed(ctx context.Context, p ClaimParams, total int) ([]Claimed, error) {
	var out []Claimed
	err := s.InTx(ctx, func(tx *Store) error {
		after := make([]string, len(p.Queues))
		for i, q := range p.Queues {
			after[i] = p.After[q]
		}
		var locked []struct {
			Queue string `bun:"queue"`
			Key   string `bun:"key"`
			Ord   int    `bun:"ord"`
		}
		if err := tx.raw(flowLockSQL, pgArray(p.Queues), pgArray(p.Limits), pgArray(after)).Scan(ctx, &locked); err != nil {
			return fmt.Errorf("lock flow keys: %w", err)
		}
		queues, keys := make([]string, len(locked)), make([]string, len(locked))
		last, lastOrd := map[string]string{}, map[string]int{}
		for i, l := range locked {
			queues[i], keys[i] = l.Queue, l.Key
			if l.Ord > lastOrd[l.Queue] {
				last[l.Queue], lastOrd[l.Queue] = l.Key, l.Ord
			}
		}
		var rows []struct {
			Claimed
			Notified int `bun:"notified"`
		}
		if err := tx.scanPrepared(ctx, &rows, tx.keyedClaimQuery(limitBucket(total)), pgArray(p.Queues), pgArray(p.Limits), p.WorkerID,
			pgArray(queues), pgArray(keys), p.WorkerID, p.Lease.Milliseconds(),
			tx.EventsChannel(), tx.ReadyChannel(), tx.ControlChannel(), false); err != nil {
			return err
		}
		out = make([]Claimed, len(rows))
		for i := range rows {
			out[i] = rows[i].Claimed
			if k, ok := last[out[i].Queue]; ok {
				out[i].AfterKey = &k
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return out, nil
}

// FlowKeyLimits are the limits of one flow key as declared by a task.
type FlowKeyLimits struct {
	Key        string `json:"key"`
	MaxRunning *int   `json:"max_running,omitempty"`
	RateLimit  *int   `json:"rate_limit,omitempty"`
	RatePerMs  *int64 `json:"rate_per_ms,omitempty"`
}

// FlowKeyRow is a flow_keys row.
type FlowKeyRow struct {
	Key        string      `bun:"key" json:"key"`
	MaxRunning *int        `bun:"max_running" json:"max_running,omitempty"`
	RateLimit  *int        `bun:"rate_limit" json:"rate_limit,omitempty"`
	RatePerMs  *int64      `bun:"rate_per_ms" json:"rate_per_ms,omitempty"`
	Starts     []time.Time `bun:"starts,array" json:"starts,omitempty"`
}

// FlowKeyGet returns a flow key's row.
func (s *Store) FlowKeyGet(ctx context.Context, key string) (*FlowKeyRow, error) {
	var row FlowKeyRow
	if err := s.raw(`SELECT key, max_running, rate_limit, rate_per_ms, starts FROM ?schema.flow_keys WHERE key = ?`, key).Scan(ctx, &row); err != nil {
		return nil, notFound(err)
	}
	return &row, nil
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
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("resume keyed task %d: %w", task.ID, err)
	}
	return moved, full, nil
}
