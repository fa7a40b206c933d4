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

// flowQuantum is how many tasks at most a key is expected to give a
// claim: a claim of n tasks visits keys until their limits (each at most
// flowQuantum) cover n. Fewer keys per claim mean less work per task and
// fewer keys that concurrent claims compete for; a turn across keys is
// then up to flowQuantum tasks of each.
const flowQuantum = "16"

// flowShare is how many tasks key x.k is expected to give a claim: its
// limit, at most flowQuantum (0 when x.k is NULL).
const flowShare = `coalesce(least((SELECT coalesce(f.max_running, f.rate_limit) FROM ?schema.flow_keys f WHERE f.key = x.k), ` + flowQuantum + `), 0)`

// flowVisit is the key walk's next key of queue q.name after the key
// expression after, as k, and whether the walk took it (took): a walk
// takes each key it visits with a transaction-scoped advisory lock, and
// skips one that another claim in flight has taken. Claims that start
// from the same turn at once then spread over different keys; without
// it all but the first would visit the same keys, find each key's row
// locked (SKIP LOCKED) and come back nearly empty. (OFFSET 0 keeps the
// subquery whole, so the key is read once and the lock tried once per
// key: pulled up, the key's subquery ran once for each of the three
// places that name y.k.)
func flowVisit(after string) string {
	return `SELECT y.k, y.k IS NOT NULL AND pg_try_advisory_xact_lock(` + flowLockClass + `, hashtext(y.k)) AS took
		FROM (SELECT (` + nextReadyKey + ` > ` + after + `) AS k OFFSET 0) y`
}

// flowTaken is what key x.k counts in the walk: its share (see
// flowShare) if the walk took it, else nothing.
const flowTaken = `CASE WHEN x.took THEN ` + flowShare + ` ELSE 0 END`

// flowLockClass is the first key of the walk's advisory locks (see
// flowVisit): "cair" in ASCII.
const flowLockClass = "1667328370"

// nextReadyKey is the least key of queue q.name with ready tasks from
// the queue's keyed floor q.kf on (see ClaimParams.KeyedFloors), compared
// (the caller completes the comparison) with a bound. The floor is a
// condition on the index entry: entries below it are passed over without
// a heap visit.
const nextReadyKey = `SELECT min(t.fair_key) FROM ?schema.tasks t
				WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf AND t.fair_key`

// keyedClaimCTEs are claimCTEs for a worker that may claim keyed tasks:
// q, cand and upd as there, cand made of unkeyed rows (as claimCTEs) and
// keyed ones within their keys' room, and three more writes: the keys'
// claims counters (rs_claims), the rate keys' new starts (rs_starts) and
// the held-back tasks of rate keys without room, whose available_at
// moves to when a start leaves the window (held). Arguments: queues,
// limits, floor priorities and times (see ClaimParams.floorArgs), keyed
// floors (see ClaimParams.keyedFloorArgs), worker id (handles), cursors
// (per queue, the key after which its turn starts), worker id, lease ms.
var keyedClaimCTEs = `
q AS (
	SELECT q.name, q.n, q.i, ` + claimFloorColumns + `,
		` + floorTime("q.kfa") + ` AS kf, w.handles
	FROM unnest(?::text[], ?::int[], ?::bigint[], ?::bigint[], ?::bigint[]) WITH ORDINALITY AS q(name, n, fp, fa, kfa, i)
	LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), qa AS (
	SELECT q.*, coalesce(a.after, '') AS after FROM q LEFT JOIN unnest(?::text[]) WITH ORDINALITY AS a(after, i) ON a.i = q.i
), c0 AS (
	-- Unkeyed: as claimCTEs, ranked as one more key.
	SELECT q.name AS queue, c.ctid, c.priority, c.available_at, c.id,
		row_number() OVER (PARTITION BY q.name ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM q CROSS JOIN LATERAL (` + claimScan + `) c
), ks AS (
	-- Per queue, the rows of the keys with ready tasks that the claim
	-- visits, locked (a key another claim holds is skipped) on their
	-- latest version: in key order from the queue's cursor, wrapping
	-- around, until their limits cover n (see flowShare). The keys come
	-- from a skip scan of tasks_claim_keyed: one index descent per key,
	-- however many tasks it has.
	SELECT q.name AS queue, q.n, q.kf, q.handles, l.* FROM qa q CROSS JOIN LATERAL (
		SELECT k.ord, f.key, f.max_running, f.claims, f.rate_limit, f.rate_per_ms, f.starts
		FROM (
			-- cum: the tasks the keys so far are expected to give (each
			-- its limit, at most flowQuantum); the scan stops once they
			-- cover the n asked.
			WITH RECURSIVE s1(key, ord, cum, took) AS (
				SELECT x.k, 1, ` + flowTaken + `, x.took FROM (` + flowVisit("q.after") + `) x
				UNION ALL
				SELECT x.k, s1.ord + 1, s1.cum + ` + flowTaken + `, x.took FROM s1 CROSS JOIN LATERAL (` + flowVisit("s1.key") + `) x
				WHERE s1.key IS NOT NULL AND s1.cum < q.n AND s1.ord < 2 * q.n
			), s2(key, ord, cum, took) AS (
				-- (The conditions in HAVING: no row, no key visited.)
				SELECT x.k, 2 * q.n + 1, c.cum + ` + flowTaken + `, x.took
				FROM (SELECT coalesce(max(cum), 0) AS cum FROM s1 WHERE key IS NOT NULL
					HAVING q.after <> '' AND coalesce(max(cum), 0) < q.n) c
				CROSS JOIN LATERAL (` + flowVisit("''") + `) x
				UNION ALL
				SELECT x.k, s2.ord + 1, s2.cum + ` + flowTaken + `, x.took FROM s2 CROSS JOIN LATERAL (` + flowVisit("s2.key") + `) x
				WHERE s2.key IS NOT NULL AND s2.key < q.after AND s2.cum < q.n AND s2.ord < 4 * q.n
			)
			SELECT key, ord FROM s1 WHERE key IS NOT NULL AND took
			UNION ALL
			SELECT key, ord FROM s2 WHERE key IS NOT NULL AND key <= q.after AND took
		) k
		-- Each key's row locked on its own (a subquery with a lock is not
		-- flattened into a join): one another claim holds is skipped.
		CROSS JOIN LATERAL (SELECT * FROM ?schema.flow_keys f WHERE f.key = k.key FOR UPDATE SKIP LOCKED) f
	) l
), lk AS (
	-- The room of each key, and how many keys its queue has here.
	SELECT ks.*, count(*) OVER (PARTITION BY ks.queue) AS nkeys,
		CASE WHEN ks.max_running IS NOT NULL
		THEN ks.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = ks.key AND t.status = 'running')::int
			- (ks.claims - coalesce((SELECT v.claims FROM ?schema.flow_keys v WHERE v.key = ks.key), 0))::int
		ELSE ks.rate_limit - (SELECT count(*) FROM unnest(ks.starts) s WHERE s > now() - ks.rate_per_ms * interval '1 millisecond')::int END AS room,
		(SELECT min(s) FROM unnest(ks.starts) s WHERE s > now() - ks.rate_per_ms * interval '1 millisecond')
			+ ks.rate_per_ms * interval '1 millisecond' AS frees_at
	FROM ks
), kc AS (
	-- Per key, its first tasks that fit its room and its share of the
	-- batch (not locked yet).
	SELECT lk.queue, c.*, row_number() OVER (PARTITION BY c.fair_key ORDER BY c.priority, c.available_at, c.id) AS rr
	FROM lk CROSS JOIN LATERAL (
		SELECT t.ctid, t.priority, t.available_at, t.id, t.fair_key, t.conc_key, t.rate_key FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = lk.queue AND t.fair_key = lk.key
			AND t.available_at >= lk.kf AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
			AND (lk.handles IS NULL OR t.workflow || '.' || t.name = ANY(lk.handles))
		ORDER BY t.priority, t.available_at, t.id
		LIMIT least(lk.n, greatest(lk.room, 0), greatest(` + flowQuantum + `, (lk.n + lk.nkeys - 1) / lk.nkeys + 1))
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
		SELECT c.ctid, lk.frees_at FROM lk
		CROSS JOIN LATERAL (
			SELECT t.ctid FROM ?schema.tasks t
			WHERE t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = lk.queue AND t.fair_key = lk.key
				AND t.available_at >= lk.kf AND t.available_at < lk.frees_at
			ORDER BY t.priority, t.available_at, t.id
			LIMIT lk.n
			FOR UPDATE OF t SKIP LOCKED
		) c
		WHERE lk.room <= 0 AND lk.frees_at IS NOT NULL AND lk.rate_limit IS NOT NULL
	) h
	WHERE t.ctid = h.ctid AND (t.status = 'ready') IS TRUE
), ` + claimUpdate + `, 'ready'::text AS from_status, 'running'::text AS to_status, t.worker_id AS held_by
), rs_claims AS (
	-- Each claim of a concurrency key counts on its row (see above).
	UPDATE ?schema.flow_keys f SET claims = f.claims + a.n
	FROM (SELECT conc_key, count(*)::int AS n FROM upd WHERE conc_key IS NOT NULL GROUP BY conc_key) a
	WHERE f.key = a.conc_key
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

// keyedClaimSQL is claimSQL over keyedClaimCTEs; after_key is the last
// key its queue's turn visited.
var keyedClaimSQL = claimStatement(keyedClaimCTEs, `,
	(SELECT ks.key FROM ks WHERE ks.queue = upd.queue ORDER BY ks.ord DESC LIMIT 1) AS after_key`)

func (s *Store) keyedClaimQuery(limit int) string {
	return s.limitQuery("keyedclaim", keyedClaimSQL, limit)
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

// keyedFloorSQL reads the least available_at of the keyed tasks of a
// queue that a worker's keyed claims could take, now or later, from a
// floor on (microseconds since the Unix epoch, 0: none), and now() when
// that is earlier. Arguments: queue, worker id, floor.
var keyedFloorSQL = `
SELECT least(min(t.available_at), now()) AS at
FROM (
	SELECT p.name, p.handles, ` + floorTime("p.kfa") + ` AS kf
	FROM (SELECT ?::text AS name, (SELECT w.handles FROM ?schema.workers w WHERE w.id = ?) AS handles, ?::bigint AS kfa) p
) q
LEFT JOIN ?schema.tasks t ON t.status = 'ready' AND t.fair_key IS NOT NULL AND t.queue = q.name AND t.available_at >= q.kf
	AND NOT EXISTS (SELECT 1 FROM ?schema.run_rows r WHERE r.id = t.run_id AND r.paused)
	AND (q.handles IS NULL OR t.workflow || '.' || t.name = ANY(q.handles))`

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
	if err := s.scanPrepared(ctx, &at, s.limitQuery("keyedfloor", keyedFloorSQL, 0), queue, workerID, floorMicros(from)); err != nil {
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

// flowKeyMarkEvery is how often at most an enqueue marks a key it uses
// (updated_at; see runInsertSQL), as SQL.
const flowKeyMarkEvery = `interval '1 hour'`

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
