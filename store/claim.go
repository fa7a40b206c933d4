package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"

	"github.com/lib/pq"
)

// This file holds every way into running by a claim: the unkeyed claim
// (TaskClaim), the keyed one (flow control, taskClaimKeyed), the claim of
// a capped queue (TaskClaimCapped), finish-and-claim (TaskFinishAndClaim,
// TaskFinishAndClaimOne) and park-and-claim (TaskDeferAndClaim,
// TaskParkAndClaimOne), with the floors their scans start at. Their
// statements are in sql/claim*.sql.

// Claimed is a task a worker just claimed, with what its handler reads.
// A claim fills the Task fields its statement returns (status, worker,
// position and shape, checkpoint, keys); the others (lease, timestamps
// but available_at, counters, last error) are left zero.
type Claimed struct {
	Task
	RunInput json.RawMessage `bun:"run_input"`
	// DepOutputs are [[idx, output], ...] of its dependencies; one whose
	// output is null may be left out (see migration 021).
	DepOutputs json.RawMessage `bun:"dep_outputs"`
	// AfterKey, from a keyed claim, is the last key its queue's turn
	// visited: the next claim of the queue starts after it.
	AfterKey *string `bun:"after_key"`
	// TraceContext is the run's trace context (see Run.TraceContext).
	TraceContext *string `bun:"trace_context"`
}

// ClaimParams asks for up to Limits[i] ready tasks of Queues[i].
type ClaimParams struct {
	WorkerID int64
	Queues   []string
	Limits   []int
	Lease    time.Duration
	// Keyed claims keyed tasks (flow control) as well as unkeyed ones,
	// round-robin across keys from After[queue] (see Claimed.AfterKey).
	Keyed bool
	After map[string]string
	// Floors are where each queue's claim scan starts in claim order
	// (priority, available_at), by queue (none: at the start): see
	// ClaimFloor.
	Floors map[string]ClaimFloor
	// KeyedFloors are where each queue's keyed claims start, by queue
	// (none: at the start): they take no keyed task whose available_at
	// is before it. See TaskKeyedFloor.
	KeyedFloors map[string]time.Time
	// Buf, when it has room, is the array the claimed rows are read
	// into: the claim returns Buf[:n] (or a larger array, when n rows do
	// not fit), so a caller that claims over and over reuses one array
	// instead of allocating one per claim. The caller keeps none of the
	// returned structs past its next claim with the same Buf.
	Buf []Claimed
}

// ClaimFloor is a position in a queue's claim order (priority, then
// available_at) below which the claimer knows of no ready task it could
// take. The claim's index scan starts there instead of at the queue's
// first entry, so it does not walk the entries of tasks claimed before:
// while a long transaction holds back the xmin, those entries cannot be
// marked dead or vacuumed, and a scan from the start would visit each
// one's heap tuple (hundreds of thousands after a minute of load).
//
// A floor is a hint the claimer keeps in memory, not a guarantee in the
// data: a transaction that commits a ready task with an older
// available_at than the floor (one that began long before it committed,
// a paused run resumed, a claim rolled back) puts it below. The claimer
// therefore sets its floor somewhat below what it claimed and lowers it
// again from TaskClaimFloor, which reads the lowest ready task without
// one. The zero ClaimFloor is no floor: the scan starts at the start.
type ClaimFloor struct {
	Priority int
	At       time.Time
}

// A floor's time goes to SQL as microseconds since the Unix epoch, 0 for
// none (the zero time.Time): floorMicros writes it, floorTime reads it
// back (an SQL expression) as a timestamptz, -infinity for none.
func floorMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// floorArgs are the claim statements' floor arguments, parallel to
// p.Queues: priorities and available_at (see floorMicros).
func (p ClaimParams) floorArgs() (any, any) {
	prio := make([]int64, len(p.Queues))
	at := make([]int64, len(p.Queues))
	for i, q := range p.Queues {
		prio[i] = math.MinInt32
		if f := p.Floors[q]; !f.At.IsZero() {
			prio[i], at[i] = int64(f.Priority), floorMicros(f.At)
		}
	}
	return pgArray(prio), pgArray(at)
}

// keyedFloorArgs are the keyed claim statement's floor argument,
// parallel to p.Queues (see floorMicros).
func (p ClaimParams) keyedFloorArgs() any {
	at := make([]int64, len(p.Queues))
	for i, q := range p.Queues {
		at[i] = floorMicros(p.KeyedFloors[q])
	}
	return pgArray(at)
}

// TaskClaimFloor reads where a claim of queue by workerID must start to
// see every task it could claim now (ok false: none). A claimer lowers
// its floor to it now and then (see ClaimFloor). It reads every entry
// of the claim index that a floor lets claims skip, so it is as slow as
// a claim without one; it locks nothing.
func (s *Store) TaskClaimFloor(ctx context.Context, queue string, workerID int64) (f ClaimFloor, ok bool, err error) {
	var rows []struct {
		Priority    int       `bun:"priority"`
		AvailableAt time.Time `bun:"available_at"`
	}
	if err := s.scanPrepared(ctx, &rows, s.query("TaskClaimFloor"), queue, workerID); err != nil {
		return ClaimFloor{}, false, fmt.Errorf("read the claim floor of queue %q: %w", queue, err)
	}
	if len(rows) == 0 {
		return ClaimFloor{}, false, nil
	}
	return ClaimFloor{Priority: rows[0].Priority, At: rows[0].AvailableAt}, true, nil
}

// TaskClaim claims ready tasks of uncapped queues in one statement: rows
// whose available_at has come, of unpaused queues and runs, in priority,
// available_at, id order, locked with SKIP LOCKED and moved to running.
func (s *Store) TaskClaim(ctx context.Context, p ClaimParams) ([]Claimed, error) {
	total := claimTotal(p.Limits)
	if total == 0 {
		return nil, nil
	}
	if p.Keyed {
		return s.taskClaimKeyed(ctx, p, total)
	}
	fp, fa := p.floorArgs()
	var notified int
	rows := &claimedRows{out: p.Buf[:0], tail: []string{"notified"}}
	rows.tailDest = []any{column{&notified}}
	err := s.scanPrepared(ctx, rows, s.claimQuery(limitBucket(total)), pgArray(p.Queues), pgArray(p.Limits), fp, fa, p.WorkerID, p.WorkerID, p.Lease.Milliseconds(),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return rows.out, nil
}

// claimTotal is how many tasks a claim asks for, over its queues.
func claimTotal(limits []int) int {
	total := 0
	for _, n := range limits {
		total += max(n, 0)
	}
	return total
}

// limitBucket is the next power of two at or above n, and at least
// minLimitBucket: a claim's literal LIMIT. It tells the planner how few
// rows come (with q.n alone it guesses a tenth of the table and picks hash
// joins over whole-table scans, and JIT compilation), and keeps the
// prepared variants few: each is planned on each connection, six times
// (five custom plans before PostgreSQL settles on the generic one) at 2-5
// ms a plan. Small claims share one variant (on the tables of a bloat
// run, the finish-and-claim's generic plan at LIMIT 32 was the one at
// LIMIT 2). The variants are statements of sql/ up to maxLimitBucket: a
// claim of more tasks (more than a queue's slots at most, see the
// engine's maxSlots) takes at most that many.
func limitBucket(n int) int {
	bucket := minLimitBucket
	for bucket < n && bucket < maxLimitBucket {
		bucket *= 2
	}
	return bucket
}

const (
	minLimitBucket = 32
	maxLimitBucket = 1 << 20
)

// claimQuery is the unkeyed claim statement whose literal LIMIT is limit
// (see limitBucket).
func (s *Store) claimQuery(limit int) string { return s.query(limitName("TaskClaim", limit)) }

// TaskClaimCapped claims from p's one queue, which has a cluster-wide
// cap: it locks the queue row, counts running tasks and claims at most
// the room left (and at most p.Limits[0]), in one transaction.
func (s *Store) TaskClaimCapped(ctx context.Context, p ClaimParams) ([]Claimed, error) {
	queue, limit := p.Queues[0], p.Limits[0]
	var out []Claimed
	err := s.InTx(ctx, func(tx *Store) error {
		var q struct {
			Paused     bool `bun:"paused"`
			MaxRunning *int `bun:"max_running"`
		}
		if err := tx.raw(`SELECT paused, max_running FROM ?schema.queues WHERE name = ? FOR UPDATE`, queue).Scan(ctx, &q); err != nil {
			return notFound(err)
		}
		if q.Paused {
			return nil
		}
		if q.MaxRunning != nil {
			var running int
			if err := tx.raw(`SELECT count(*) FROM ?schema.tasks WHERE queue = ? AND status = 'running'`, queue).Scan(ctx, &running); err != nil {
				return err
			}
			limit = min(limit, *q.MaxRunning-running)
		}
		if limit <= 0 {
			return nil
		}
		var err error
		p.Limits = []int{limit}
		out, err = tx.TaskClaim(ctx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim from capped queue %s: %w", queue, err)
	}
	return out, nil
}

// TaskFinishAndClaim applies p as TransitionAll does and, in the same
// transaction, claims as claim asks (TaskClaim): a worker's finished tasks
// hand their slots to its next ones at one commit. The claim must ask for
// no more tasks than the slots the caller frees, so the worker's running
// rows never exceed its slots.
func (s *Store) TaskFinishAndClaim(ctx context.Context, p TransitionParams, claim ClaimParams) (moved, released []Moved, claimed []Claimed, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var err error
		if moved, released, err = tx.TransitionAll(ctx, p); err != nil {
			return err
		}
		claimed, err = tx.TaskClaim(ctx, claim)
		return err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("finish %d tasks and claim: %w", len(p.Items), err)
	}
	return moved, released, claimed, nil
}

// TaskDeferClaimParams parks running tasks (Park: items to deferred) and,
// in the same transaction, claims ready tasks for the slots they free.
type TaskDeferClaimParams struct {
	Park TransitionParams
	// Queues whose freed slots are claimed for at once (uncapped queues
	// with nobody waiting for a slot); slots freed in others are left to
	// the caller.
	Queues []string
	Lease  time.Duration
	// Keyed and After are as in ClaimParams.
	Keyed bool
	After map[string]string
	// Floors and KeyedFloors are as in ClaimParams.
	Floors      map[string]ClaimFloor
	KeyedFloors map[string]time.Time
}

// TaskDeferAndClaim moves p.Park's items running -> deferred and claims,
// per queue of p.Queues, as many ready tasks as moved tasks of that queue
// left running: the parked tasks' slots pass to the claimed ones at one
// commit, so the running rows of the worker never exceed its slots.
func (s *Store) TaskDeferAndClaim(ctx context.Context, p TaskDeferClaimParams) (moved []Moved, claimed []Claimed, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var err error
		if moved, err = tx.Transition(ctx, p.Park); err != nil {
			return err
		}
		freed := map[string]int{}
		for _, m := range moved {
			freed[m.Queue]++
		}
		var cp ClaimParams
		for _, q := range p.Queues {
			if n := freed[q]; n > 0 {
				cp.Queues = append(cp.Queues, q)
				cp.Limits = append(cp.Limits, n)
			}
		}
		if len(cp.Queues) == 0 {
			return nil
		}
		cp.WorkerID, cp.Lease, cp.Keyed, cp.After, cp.Floors, cp.KeyedFloors = p.Park.WorkerID, p.Lease, p.Keyed, p.After, p.Floors, p.KeyedFloors
		claimed, err = tx.TaskClaim(ctx, cp)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("defer %d tasks and claim: %w", len(p.Park.Items), err)
	}
	return moved, claimed, nil
}

// after is, per queue of p, the key after which its keyed claim's turn
// starts (After; "" from the first key).
func (p ClaimParams) after() []string {
	after := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		after[i] = p.After[q]
	}
	return after
}

// keyedClaimQuery is the keyed claim, one statement for every batch size
// (see keyedClaimCTEs).
func (s *Store) keyedClaimQuery() string {
	return s.query("TaskClaimKeyed")
}

// taskClaimKeyed is TaskClaim for a worker that may claim keyed tasks.
func (s *Store) taskClaimKeyed(ctx context.Context, p ClaimParams, total int) ([]Claimed, error) {
	var notified int
	rows := &claimedRows{out: p.Buf[:0], tail: []string{"after_key", "notified"}}
	rows.tailDest = []any{column{&rows.cur.AfterKey}, column{&notified}}
	fp, fa := p.floorArgs()
	err := s.scanPrepared(ctx, rows, s.keyedClaimQuery(), pgArray(p.Queues), pgArray(p.Limits), fp, fa, p.keyedFloorArgs(), p.WorkerID,
		pgArray(p.after()), p.WorkerID, p.Lease.Milliseconds(),
		s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
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
// alone. It makes two index descents for each key and priority of the
// queue's keyed ready tasks (a skip scan, see keyedFloorSQL), whatever
// their number, and callers space it out. A read from a floor raises it
// past the tasks claimed since; one from the start also finds a task made
// ready below the floor (a run resumed, a transaction that committed long
// after it began, a claim rolled back).
func (s *Store) TaskKeyedFloor(ctx context.Context, queue string, workerID int64, from time.Time) (time.Time, error) {
	var at []time.Time
	if err := s.scanPrepared(ctx, &at, s.query("TaskKeyedFloor"), queue, workerID, floorMicros(from)); err != nil {
		return time.Time{}, fmt.Errorf("read the keyed claim floor of queue %q: %w", queue, err)
	}
	return at[0], nil
}

func (s *Store) finishKeyedClaimQuery() string {
	return s.query("TaskFinishClaimKeyed")
}

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
// dependents. A keyed claim (claim.Keyed) counts its keys' room without
// the tasks the statement finishes, as the claim after the finish in
// TaskFinishAndClaim's transaction does, and a keyed task it finishes
// wakes its queue, as TransitionAll does. A task of p that has
// dependents after all is left as it is (not moved) rather than written
// without its release; the caller sees it missing from moved. The claim
// asks for no more tasks than the slots the caller frees. A batch that
// finishes a run other runs wait for (see RunInsertParams.After) is
// written by TaskFinishAndClaim instead, which releases their roots in
// its transaction; that costs the store no lookup for runs nobody waits
// for.
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
	items, err := itemsJSON(p.Items)
	if err != nil {
		return nil, nil, err
	}
	// A row per claimed task, at least one; the moves come on the first.
	var moves json.RawMessage
	var notified int
	rows := &claimedRows{out: claim.Buf[:0], tail: []string{"ord", "moved", "notified"}}
	rows.tailDest = []any{skip{}, firstJSON{&moves}, column{&notified}}
	fp, fa := claim.floorArgs()
	limit := limitBucket(claimTotal(claim.Limits))
	if claim.Keyed && !park {
		rows.tail = []string{"after_key", "ord", "moved", "notified"}
		rows.tailDest = []any{column{&rows.cur.AfterKey}, skip{}, firstJSON{&moves}, column{&notified}}
		err = s.scanPrepared(ctx, rows, s.finishKeyedClaimQuery(), jsonArg(items), p.WorkerID, p.WorkerID,
			pgArray(claim.Queues), pgArray(claim.Limits), fp, fa, claim.keyedFloorArgs(), claim.WorkerID,
			pgArray(claim.after()), claim.WorkerID, claim.Lease.Milliseconds(),
			s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	} else {
		err = s.scanPrepared(ctx, rows, s.finishClaimQuery(limit, park), jsonArg(items), p.WorkerID, p.WorkerID,
			pgArray(claim.Queues), pgArray(claim.Limits), fp, fa, claim.WorkerID, claim.WorkerID, claim.Lease.Milliseconds(),
			s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), false)
	}
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

// limitName is the name of the variant of the claim statement name whose
// literal LIMIT is limit (see limitBucket).
func limitName(name string, limit int) string {
	if names, ok := limitNames[name]; ok {
		if i := bits.TrailingZeros(uint(limit / minLimitBucket)); i < len(names) && minLimitBucket<<i == limit {
			return names[i] // no allocation on the claim's path
		}
	}
	return name + "Limit" + strconv.Itoa(limit)
}

// limitNames are the names of the claim statements' variants, by
// statement and bucket (minLimitBucket << i).
var limitNames = func() map[string][]string {
	m := map[string][]string{}
	for _, name := range []string{"TaskClaim", "TaskFinishClaim", "TaskParkClaim"} {
		for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
			m[name] = append(m[name], name+"Limit"+strconv.Itoa(n))
		}
	}
	return m
}()

// FinishAndClaimStatements returns the two statements of
// TaskFinishAndClaim as PostgreSQL receives them ($n parameters, the
// schema filled in): finish moves the tasks a worker knows it holds (to
// completed: events, run counters and statuses, NOTIFY), claim takes up
// to batch ready tasks of a queue. The benchmark's ceiling runs them
// under pgbench (cmd/bench/internal/ceiling).
func (s *Store) FinishAndClaimStatements(batch int) (finish, claim string) {
	return s.transitionQuery(true, false, true), s.claimQuery(limitBucket(batch))
}

// KeyedClaimStatement returns the keyed claim (flow control, see
// taskClaimKeyed) as PostgreSQL receives it, for the benchmark's ceiling
// as FinishAndClaimStatements.
func (s *Store) KeyedClaimStatement() string {
	return s.keyedClaimQuery()
}
