package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lib/pq"
)

func (s *Store) finishClaimQuery(limit int, park bool) string {
	if park {
		return s.query(limitName("TaskParkClaim", limit))
	}
	return s.query(limitName("TaskFinishClaim", limit))
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
