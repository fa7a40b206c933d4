package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Flow control. A task declared with a concurrency limit carries a
// conc_key, one with a rate limit a rate_key (see FlowKey); the limits
// live on the key's flow_keys row, written at enqueue. flow_keys.running
// is kept by a statement trigger on tasks (tasks_flow_running), so every
// way a task leaves running (completion, parking, rescue, cancel, delete)
// gives its place back at commit. The two ways in, a claim and a resume,
// lock the key's row first and take only the room it shows:
//
//   - concurrency: max_running - running;
//   - rate: rate_limit minus the starts recorded since now() - Per
//     (counted without an upper bound, so a start recorded by a
//     transaction that began later still counts; with the row locked,
//     every start is checked against all those recorded before it, and
//     no window of length Per can hold more than rate_limit of them).
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

// keyedClaimCTEs are claimCTEs for a worker that may claim keyed tasks:
// q, cand and upd as there, cand made of unkeyed rows (as claimCTEs) and
// keyed ones admitted within their keys' room, and two more writes: the
// rate keys' new starts (rs_starts) and the held-back tasks of rate keys
// without room, whose available_at moves to when one frees (held).
// Arguments: queues, limits, cursors (per queue, the key after which
// keys are visited), worker id, lease ms.
const keyedClaimCTEs = `
q AS (
	SELECT * FROM unnest(?::text[], ?::int[], ?::text[]) AS q(name, n, after)
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), c0 AS (
	-- Unkeyed: as claimCTEs, ranked as one more key.
	SELECT q.name AS queue, c.ctid, c.priority, c.available_at, c.id,
		row_number() OVER (PARTITION BY q.name ORDER BY c.priority, c.available_at, c.id) AS rr, NULL::text AS rate_key
	FROM q CROSS JOIN LATERAL (` + claimScan + `) c
), ks AS (
	-- Keys with ready tasks, in turns from each queue's cursor.
	SELECT q.name AS queue, q.n, k.key, k.ord FROM q
	CROSS JOIN LATERAL ?schema.flow_ready_keys(q.name, q.after, q.n) WITH ORDINALITY AS k(key, ord)
), lk AS (
	-- The keys' rows, locked (a key another claim holds is skipped) and
	-- read on their latest version: the room each has.
	SELECT f.key, f.rate_per_ms,
		CASE WHEN f.max_running IS NOT NULL THEN f.max_running - f.running
		ELSE f.rate_limit - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')::int END AS room,
		(SELECT min(s) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')
			+ f.rate_per_ms * interval '1 millisecond' AS frees_at
	FROM ?schema.flow_keys f WHERE f.key IN (SELECT key FROM ks)
	ORDER BY f.key
	FOR UPDATE SKIP LOCKED
), kc AS (
	-- Per key, its first tasks that fit its room (not locked yet).
	SELECT ks.queue, c.*, row_number() OVER (PARTITION BY c.fair_key ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM ks JOIN lk ON lk.key = ks.key
	CROSS JOIN LATERAL (
		SELECT t.ctid, t.priority, t.available_at, t.id, t.fair_key, t.conc_key, t.rate_key FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = ks.queue AND t.fair_key = ks.key
			AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.runs r WHERE r.id = t.run_id AND r.paused)
		ORDER BY t.priority, t.available_at, t.id
		LIMIT least(ks.n, greatest(lk.room, 0))
	) c
), lr AS (
	-- Rate keys of tasks limited by both a concurrency and a rate key.
	SELECT f.key, f.rate_limit - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - f.rate_per_ms * interval '1 millisecond')::int AS room
	FROM ?schema.flow_keys f
	WHERE f.key IN (SELECT rate_key FROM kc WHERE conc_key IS NOT NULL AND rate_key IS NOT NULL) AND f.key NOT IN (SELECT key FROM lk)
	ORDER BY f.key
	FOR UPDATE SKIP LOCKED
), rooms AS (
	SELECT key, room FROM lk UNION ALL SELECT key, room FROM lr
), kok AS (
	-- Keyed candidates within their rate key's room as well.
	SELECT x.queue, x.ctid, x.priority, x.available_at, x.id, x.rr, x.rate_key FROM (
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
), cursor AS (
	SELECT DISTINCT ON (queue) queue, key FROM ks ORDER BY queue, ord DESC`

// keyedClaimSQL is claimSQL over keyedClaimCTEs; each row also says
// after which key the queue's next claim starts its turn (after_key).
var keyedClaimSQL = claimStatement(keyedClaimCTEs+`
)`, `, (SELECT key FROM cursor WHERE cursor.queue = upd.queue) AS after_key`)

func (s *Store) keyedClaimQuery(limit int) string {
	return s.limitQuery("keyedclaim", keyedClaimSQL, limit)
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
	Running    int         `bun:"running" json:"running"`
	RateLimit  *int        `bun:"rate_limit" json:"rate_limit,omitempty"`
	RatePerMs  *int64      `bun:"rate_per_ms" json:"rate_per_ms,omitempty"`
	Starts     []time.Time `bun:"starts,array" json:"starts,omitempty"`
}

// FlowKeyGet returns a flow key's row.
func (s *Store) FlowKeyGet(ctx context.Context, key string) (*FlowKeyRow, error) {
	var row FlowKeyRow
	if err := s.raw(`SELECT key, max_running, running, rate_limit, rate_per_ms, starts FROM ?schema.flow_keys WHERE key = ?`, key).Scan(ctx, &row); err != nil {
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
		var room []int
		if err := tx.raw(`SELECT f.max_running - f.running FROM ?schema.flow_keys f
			WHERE f.key = (SELECT conc_key FROM ?schema.tasks WHERE id = ?) FOR UPDATE`, task.ID).Scan(ctx, &room); err != nil {
			return err
		}
		if len(room) == 1 && room[0] <= 0 {
			full = true
			return nil
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
