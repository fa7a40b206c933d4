package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// finishClaimSQL finishes a worker's batch of tasks that have no
// dependents and claims the next ready tasks, in ONE statement: the
// completion's compare-and-set update (rows in known states, see
// curKnown), the claim (as claimSQL), one event per move, one update per
// run for both (a run may have a task finishing and another starting in
// the same statement, and a row is updated once per statement), and
// NOTIFY. The finished rows are not read and locked ahead (see
// curKnown): the update checks each on its latest version. With nothing to release, nothing else has to run in its
// transaction, so it commits on its own: one round trip instead of four
// (BEGIN, finish, claim, COMMIT).
//
// Arguments: items (jsonb), worker id (compare-and-set), worker id
// (held_by), queues, limits, worker id, lease ms, events, ready and control channels, whether to announce taken
// tasks (false). /*limit*/ is the claim's literal LIMIT (see TaskClaim).
var finishClaimSQL = `
WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS v(id bigint, to_status text, from_status text, attempt int, error text, detail jsonb, output jsonb, delay_ms bigint, rescue boolean, lease_ms bigint)
), fin AS (
	UPDATE ?schema.tasks t SET
		status = v.to_status,
		worker_id = CASE WHEN v.to_status IN ('running', 'deferred') THEN t.worker_id END,
		lease_expires_at = CASE WHEN v.to_status IN ('running', 'deferred')
			THEN coalesce(now() + v.lease_ms * interval '1 millisecond', t.lease_expires_at) END,
		available_at = CASE WHEN v.to_status = 'ready' THEN now() + coalesce(v.delay_ms, 0) * interval '1 millisecond' ELSE t.available_at END,
		output = CASE WHEN v.to_status = 'completed' THEN v.output ELSE t.output END,
		last_error = coalesce(v.error, t.last_error),
		rescues = t.rescues + CASE WHEN coalesce(v.rescue, false) THEN 1 ELSE 0 END,
		finished_at = CASE WHEN v.to_status IN ` + doneStates + ` THEN now() END,
		updated_at = now()
	FROM v
	-- Each item once, by primary key, compare-and-set on its latest
	-- version: the state it names, its attempt, this worker.
	WHERE t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND cardinality(t.dependents) = 0
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, v.error, v.detail
), q AS (
	SELECT * FROM unnest(?::text[], ?::int[]) AS q(name, n)
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)
), cand AS (
	SELECT c.ctid FROM q CROSS JOIN LATERAL (
		SELECT t.ctid FROM ?schema.tasks t
		WHERE t.status = 'ready' AND t.queue = q.name AND t.available_at <= now()
			AND NOT EXISTS (SELECT 1 FROM ?schema.runs r WHERE r.id = t.run_id AND r.paused)
		ORDER BY t.priority, t.available_at, t.id
		LIMIT q.n
		FOR UPDATE OF t SKIP LOCKED
	) c
	LIMIT /*limit*/
), upd AS (
	UPDATE ?schema.tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = ?,
		lease_expires_at = now() + ? * interval '1 millisecond', started_at = now(), updated_at = now()
	WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM cand)) AND (t.status = 'ready') IS TRUE
	RETURNING t.*
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), delta AS (
	` + runCounters("mv") + `
), rs AS (
	UPDATE ?schema.runs r SET ` + runSet("r.done_tasks + d.done", "r.failed_tasks + d.failed",
	"r.cancelled_tasks + d.cancelled", "r.interrupted_tasks + d.interrupted", "d.started") + `
	FROM delta d
	WHERE r.id = d.run_id AND (d.done <> 0 OR d.failed <> 0 OR d.cancelled <> 0 OR d.interrupted <> 0
		OR (d.started AND r.started_at IS NULL))
)` + notifyCTEs("mv") + `
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, ` + notifyForce + ` AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved FROM fin) m
LEFT JOIN LATERAL (
	SELECT upd.id, upd.run_id, upd.idx, upd.workflow, upd.name, upd.queue, upd.priority, upd.status, upd.attempt,
		upd.max_attempts, upd.available_at, upd.deps, upd.dependents, upd.pending_deps, upd.trigger_rule,
		upd.requeue_on_interrupt, upd.rescues, upd.max_rescues, upd.worker_id, upd.lease_expires_at, upd.checkpoint,
		upd.last_error, upd.created_at, upd.started_at, upd.updated_at, r.input AS run_input,
		CASE WHEN cardinality(upd.deps) > 0 THEN (SELECT jsonb_agg(jsonb_build_array(d.idx, d.output)) FROM ?schema.tasks d
		 WHERE d.run_id = upd.run_id AND d.idx = ANY(upd.deps)) END AS dep_outputs,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.runs r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord`

func (s *Store) finishClaimQuery(limit int) string {
	key := s.schema + "/finishclaim/" + strconv.Itoa(limit)
	if q, ok := queries.Load(key); ok {
		return q.(string)
	}
	q := positional(strings.Replace(finishClaimSQL, "/*limit*/", strconv.Itoa(limit), 1), s.schema)
	queries.Store(key, q)
	return q
}

// FinishClaimable reports whether TaskFinishAndClaimOne can write p:
// a worker's batch whose every item names its row's state (From) and
// whose tasks have no dependents (the caller knows from the workflow), so
// that nothing has to be released in the transaction.
func FinishClaimable(p TransitionParams) bool {
	if p.WorkerID == 0 || p.LeaseExpired {
		return false
	}
	for _, it := range p.Items {
		if it.From == "" || !containsString(p.From, it.From) || it.To == StatusRunning || it.To == StatusDeferred {
			return false
		}
	}
	return true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TaskFinishAndClaimOne is TaskFinishAndClaim in one statement and one
// commit, for batches FinishClaimable accepts whose tasks have no
// dependents. A task of p that has dependents after all is left as it is
// (not moved) rather than written without its release; the caller sees
// it missing from moved. The claim asks for no more tasks than the slots
// the caller frees.
func (s *Store) TaskFinishAndClaimOne(ctx context.Context, p TransitionParams, claim ClaimParams) (moved []Moved, claimed []Claimed, err error) {
	if !FinishClaimable(p) {
		return nil, nil, fmt.Errorf("finish and claim in one statement: %w: items must name their state, and none may stay held", ErrInvalidValue)
	}
	items, err := json.Marshal(p.Items)
	if err != nil {
		return nil, nil, err
	}
	total := 0
	for _, n := range claim.Limits {
		total += max(n, 0)
	}
	bucket := 1
	for bucket < total {
		bucket *= 2
	}
	var rows []struct {
		Claimed
		Ord      int             `bun:"ord"`
		Moved    json.RawMessage `bun:"moved"` // on the first row only
		Notified int             `bun:"notified"`
	}
	err = s.scanPrepared(ctx, &rows, s.finishClaimQuery(bucket), jsonArg(items), p.WorkerID, p.WorkerID,
		pgArray(claim.Queues), pgArray(claim.Limits), claim.WorkerID, claim.Lease.Milliseconds(),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	if err != nil {
		return nil, nil, fmt.Errorf("finish %d tasks and claim: %w", len(p.Items), err)
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	var ms [][]json.RawMessage
	if err := json.Unmarshal(rows[0].Moved, &ms); err != nil {
		return nil, nil, fmt.Errorf("finish and claim: read moves: %w", err)
	}
	worker := p.WorkerID
	moved = make([]Moved, 0, len(ms))
	for _, m := range ms {
		var mv Moved
		if len(m) != 6 || json.Unmarshal(m[0], &mv.TaskID) != nil || json.Unmarshal(m[1], &mv.RunID) != nil ||
			json.Unmarshal(m[2], &mv.Queue) != nil || json.Unmarshal(m[3], &mv.From) != nil ||
			json.Unmarshal(m[4], &mv.To) != nil || json.Unmarshal(m[5], &mv.Attempt) != nil {
			return nil, nil, fmt.Errorf("finish and claim: bad move %s", m)
		}
		mv.WorkerID = &worker
		moved = append(moved, mv)
	}
	for _, r := range rows {
		if r.ID != 0 {
			claimed = append(claimed, r.Claimed)
		}
	}
	return moved, claimed, nil
}
