package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lib/pq"
)

// finishClaimSQL finishes a worker's batch of tasks that have no
// dependents and claims the next ready tasks, in ONE statement: the
// completion's compare-and-set update (rows in known states, see
// curKnown), the claim (as claimSQL), one event per move, one update per
// run for both (a run may have a task finishing and another starting in
// the same statement, and a row is updated once per statement), and
// NOTIFY. The finished rows are not read and locked ahead (see
// curKnown): the update checks each on its latest version. With nothing
// to release, nothing else has to run in its transaction, so it commits
// on its own: one round trip instead of four (BEGIN, finish, claim,
// COMMIT).
//
// Arguments: items (jsonb), worker id (compare-and-set), worker id
// (held_by), then claimCTEs' (queues, limits, worker id, worker id, lease
// ms), then events, ready and control channels, whether to announce taken
// tasks (false). /*limit*/ is the claim's literal LIMIT (see TaskClaim).
var finishClaimSQL = `
WITH v AS (
	SELECT * FROM jsonb_to_recordset(?::jsonb) AS ` + transitionItems + `
), fin AS (
	UPDATE ?schema.tasks t SET` + transitionSet("v.from_status") + `
	FROM v
	-- Each item once, by primary key (named twice, see transitionSQL's
	-- upd), compare-and-set on its latest version: the state it names,
	-- its attempt, this worker.
	WHERE t.id = ANY(ARRAY(SELECT id FROM v)) AND t.id = v.id AND (t.status = v.from_status AND (coalesce(v.attempt, 0) = 0 OR t.attempt = v.attempt)
			AND t.worker_id = ?) IS TRUE
		AND cardinality(t.dependents) = 0/*leaf*/
	RETURNING t.id, t.run_id, t.queue, t.status AS to_status, v.from_status, ?::bigint AS held_by, t.attempt, coalesce(t.first_started_at, t.started_at) AS started_at, t.run_fast, v.error, v.detail
), ` + claimCTEs + `
), mv AS (
	SELECT id, run_id, queue, from_status, to_status, attempt, held_by, error, detail FROM fin
	UNION ALL
	SELECT id, run_id, queue, 'ready', 'running', attempt, worker_id, NULL, NULL FROM upd
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, error, detail)
	SELECT run_id, id, from_status, to_status, held_by, attempt, error, detail FROM mv
), ` + runUpdateCTEs("fin") + notifyCTEs("mv") + `
-- The finished moves come once, on the first row (with no claims, the
-- only one, its claim columns NULL).
SELECT c.*, CASE WHEN coalesce(c.ord, 1) = 1 THEN m.moved END AS moved, ` + notifyForce + ` + coalesce(m.refused, 0) AS notified
FROM (SELECT coalesce(json_agg(json_build_array(id, run_id, queue, from_status, to_status, attempt)), '[]') AS moved,
	-- A run finished here that others wait for (set on its latest
	-- version, so also by an enqueue committed meanwhile) fails the
	-- statement: its waiters are settled by the transaction path.
	CASE WHEN EXISTS (SELECT 1 FROM rs WHERE settle)
		THEN ?schema.finish_claim_refused(ARRAY(SELECT id FROM rs WHERE settle)) END AS refused
	FROM fin) m
LEFT JOIN LATERAL (
	SELECT ` + claimedColumns + `,
		row_number() OVER (ORDER BY upd.priority, upd.id) AS ord
	FROM upd JOIN ?schema.run_rows r ON r.id = upd.run_id
) c ON true
ORDER BY c.ord`

// parkClaimSQL is finishClaimSQL for a worker's batch of parks (running
// -> deferred, see TaskParkAndClaimOne). A park releases nothing, so a
// task with dependents parks too. The claim takes no more tasks of a
// queue than the statement parked of it: a park that finds its row gone
// (cancelled, rescued) leaves its slot with its handler until that
// returns, so claiming for it would run more tasks than slots.
var parkClaimSQL = strings.NewReplacer(
	"cardinality(t.dependents) = 0/*leaf*/", "v.to_status = 'deferred'",
	claimQueues, parkClaimQueues,
).Replace(finishClaimSQL)

// parkClaimQueues is claimQueues with each queue's n bounded by the
// parks of fin in it. Arguments: as claimQueues.
var parkClaimQueues = `
	SELECT q.name, least(q.n, (SELECT count(*) FROM fin WHERE fin.queue = q.name))::int AS n, ` + claimFloorColumns + `, w.handles
	FROM unnest((SELECT ?::text[]), (SELECT ?::int[]), (SELECT ?::bigint[]), (SELECT ?::bigint[])) AS q(name, n, fp, fa) LEFT JOIN ?schema.workers w ON w.id = ?
	WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM ?schema.queues p WHERE p.name = q.name AND p.paused)`

func (s *Store) finishClaimQuery(limit int, park bool) string {
	if park {
		return s.limitQuery("parkclaim", parkClaimSQL, limit)
	}
	return s.limitQuery("finishclaim", finishClaimSQL, limit)
}

// FinishClaimable reports whether TaskFinishAndClaimOne can write p:
// a worker's batch whose every item names its row's state (From) and
// whose tasks have no dependents (the caller knows from the workflow), so
// that nothing has to be released in the transaction.
func FinishClaimable(p TransitionParams) bool {
	if !p.statesKnown() {
		return false
	}
	for _, it := range p.Items {
		if it.To == StatusRunning || it.To == StatusDeferred {
			return false
		}
	}
	return true
}

// ParkClaimable reports whether TaskParkAndClaimOne can write p: a
// worker's batch of its running tasks moving to deferred, each item
// naming its state.
func ParkClaimable(p TransitionParams) bool {
	if !p.statesKnown() {
		return false
	}
	for _, it := range p.Items {
		if it.From != StatusRunning || it.To != StatusDeferred {
			return false
		}
	}
	return true
}

// TaskParkAndClaimOne is TaskDeferAndClaim in one statement and one
// commit, for batches ParkClaimable accepts: the parks (with their
// durable waits), the claim of the next ready tasks for the slots they
// free, events and NOTIFY. It claims at most as many tasks of a queue as
// it parked of it, and never more than claim.Limits. Keyed claims go
// through TaskDeferAndClaim (a keyed claim counts its key's places).
func (s *Store) TaskParkAndClaimOne(ctx context.Context, p TransitionParams, claim ClaimParams) (moved []Moved, claimed []Claimed, err error) {
	if !ParkClaimable(p) || claim.Keyed {
		return nil, nil, fmt.Errorf("park and claim in one statement: %w: items must move the worker's running tasks to deferred, and the claim be unkeyed", ErrInvalidValue)
	}
	return s.finishClaimOne(ctx, p, claim, true)
}

// TaskFinishAndClaimOne is TaskFinishAndClaim in one statement and one
// commit, for batches FinishClaimable accepts whose tasks have no
// dependents. A task of p that has dependents after all is left as it is
// (not moved) rather than written without its release; the caller sees
// it missing from moved. The claim asks for no more tasks than the slots
// the caller frees. A batch that finishes a run other runs wait for (see
// RunInsertParams.After) is written by TaskFinishAndClaim instead, which
// releases their roots in its transaction; that costs the store no lookup
// for runs nobody waits for.
func (s *Store) TaskFinishAndClaimOne(ctx context.Context, p TransitionParams, claim ClaimParams) (moved []Moved, claimed []Claimed, err error) {
	if !FinishClaimable(p) {
		return nil, nil, fmt.Errorf("finish and claim in one statement: %w: items must name their state, and none may stay held", ErrInvalidValue)
	}
	moved, claimed, err = s.finishClaimOne(ctx, p, claim, false)
	var pe *pq.Error
	if !s.inTx && errors.As(err, &pe) && pe.Code == finishClaimRefused {
		// The statement rolled back whole: nothing was written.
		moved, _, claimed, err = s.TaskFinishAndClaim(ctx, p, claim)
	}
	return moved, claimed, err
}

// finishClaimRefused is the SQLSTATE of finish_claim_refused (see
// migration 012): the statement would finish a run others wait for.
const finishClaimRefused = "CRW01"

func (s *Store) finishClaimOne(ctx context.Context, p TransitionParams, claim ClaimParams, park bool) (moved []Moved, claimed []Claimed, err error) {
	items, err := json.Marshal(p.Items)
	if err != nil {
		return nil, nil, err
	}
	// A row per claimed task, at least one; the moves come on the first.
	var moves json.RawMessage
	var notified int
	rows := &claimedRows{out: claim.Buf[:0], tail: []string{"ord", "moved", "notified"}}
	rows.tailDest = []any{skip{}, firstJSON{&moves}, column{&notified}}
	fp, fa := claim.floorArgs()
	err = s.scanPrepared(ctx, rows, s.finishClaimQuery(limitBucket(claimTotal(claim.Limits)), park), jsonArg(items), p.WorkerID, p.WorkerID,
		pgArray(claim.Queues), pgArray(claim.Limits), fp, fa, claim.WorkerID, claim.WorkerID, claim.Lease.Milliseconds(),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	if err != nil {
		what := "finish"
		if park {
			what = "park"
		}
		return nil, nil, fmt.Errorf("%s %d tasks and claim: %w", what, len(p.Items), err)
	}
	if moves == nil { // no row
		return nil, nil, nil
	}
	var ms []moveTuple
	if err := json.Unmarshal(moves, &ms); err != nil {
		return nil, nil, fmt.Errorf("finish and claim: read moves: %w", err)
	}
	worker := p.WorkerID
	moved = make([]Moved, len(ms))
	for i := range ms {
		if ms[i].TaskID == 0 {
			return nil, nil, fmt.Errorf("finish and claim: a move without a task id in %.200s", moves)
		}
		moved[i] = Moved(ms[i])
		moved[i].WorkerID = &worker
	}
	if len(rows.out) > 0 {
		claimed = rows.out
	}
	return moved, claimed, nil
}

// moveTuple is one move of a finish-and-claim's "moved" column, the JSON
// array [id, run_id, queue, from_status, to_status, attempt], decoded in
// place: one pass over the array instead of a value per element.
type moveTuple Moved

func (m *moveTuple) UnmarshalJSON(b []byte) error {
	t := [6]any{&m.TaskID, &m.RunID, &m.Queue, &m.From, &m.To, &m.Attempt}
	return json.Unmarshal(b, &t)
}
