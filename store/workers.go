package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// WorkerInsert registers a worker process that declares no routing
// (handles NULL): its claims take any task of its queues. Engines use
// WorkerRegister; this is for tools and tests.
func (s *Store) WorkerInsert(ctx context.Context, name string, queues map[string]int) (int64, error) {
	return s.workerInsert(ctx, WorkerRegisterParams{Name: name, Queues: queues})
}

// WorkerRegisterParams registers a worker process.
type WorkerRegisterParams struct {
	Name string
	// Queues are the slots the worker gives each queue it serves.
	Queues map[string]int
	// Handles are the "workflow.task" names the worker runs: its claims
	// take only tasks among them (none when empty).
	Handles []string
	// Versions are the "workflow@version" names the worker serves: its
	// claims take a task of a run with a version only when it is among
	// them. Nil serves any.
	Versions []string
}

// WorkerRegister registers a worker process that claims only the tasks
// it handles, and returns its id.
func (s *Store) WorkerRegister(ctx context.Context, p WorkerRegisterParams) (int64, error) {
	p.Handles = nonNilStrings(p.Handles)
	return s.workerInsert(ctx, p)
}

func (s *Store) workerInsert(ctx context.Context, p WorkerRegisterParams) (int64, error) {
	name, queues, handles := p.Name, p.Queues, p.Handles
	slots := 0
	for _, n := range queues {
		slots += n
	}
	q, err := json.Marshal(queues)
	if err != nil {
		return 0, err
	}
	var h any // NULL: no routing declared
	if handles != nil {
		h = array(handles)
	}
	var v any // NULL: serves any version
	if p.Versions != nil {
		v = array(p.Versions)
	}
	var id int64
	if err := s.raw(`INSERT INTO ?schema.workers (name, queues, slots, handles, versions) VALUES (?, ?::jsonb, ?, ?::text[], ?::text[]) RETURNING id`,
		name, jsonArg(q), slots, h, v).Scan(ctx, &id); err != nil {
		return 0, fmt.Errorf("register worker: %w", err)
	}
	return id, nil
}

// WorkerSetHandles replaces the "workflow.task" names a worker runs
// (its claims take only those; none when empty), as an engine that
// registers a workflow after it started does.
func (s *Store) WorkerSetHandles(ctx context.Context, workerID int64, handles []string) error {
	res, err := s.exec(ctx, `UPDATE ?schema.workers SET handles = ?::text[] WHERE id = ?`, array(nonNilStrings(handles)), workerID)
	if err != nil {
		return fmt.Errorf("set handles of worker %d: %w", workerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set handles of worker %d: %w", workerID, ErrNotFound)
	}
	return nil
}

// WorkerSetRouting replaces the "workflow.task" names a worker runs and
// the "workflow@version" names it serves (see WorkerRegisterParams; nil
// versions serve any), as an engine that registers a workflow after it
// started does.
func (s *Store) WorkerSetRouting(ctx context.Context, workerID int64, handles, versions []string) error {
	var v any // NULL: serves any version
	if versions != nil {
		v = array(versions)
	}
	res, err := s.exec(ctx, `UPDATE ?schema.workers SET handles = ?::text[], versions = ?::text[] WHERE id = ?`,
		array(nonNilStrings(handles)), v, workerID)
	if err != nil {
		return fmt.Errorf("set routing of worker %d: %w", workerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set routing of worker %d: %w", workerID, ErrNotFound)
	}
	return nil
}

// nonNilStrings is v, or an empty slice for nil: an empty array, not NULL.
func nonNilStrings(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// WorkerHeartbeatParams renews a worker's row and the leases of the
// tasks it holds.
type WorkerHeartbeatParams struct {
	WorkerID int64
	// Lease is how long a renewed lease lasts from now.
	Lease time.Duration
	// RenewWithin, when non-zero, renews only the leases that expire
	// within it: a worker with thousands of deferred tasks does not
	// rewrite (and lock) every row at every beat. It must leave more than
	// a heartbeat interval of margin.
	RenewWithin time.Duration
	// Only, when not nil, limits the beat to these tasks: it reads them
	// by primary key and renews and returns those the worker still
	// holds. A beat without it reads every task the worker holds through
	// the lease index, which, while a long transaction holds back the
	// xmin, keeps an entry for every task the worker ran since: hundreds
	// of milliseconds a beat after minutes of load, seconds after an
	// hour. Tasks held but not listed (a claim whose reply was lost) are
	// found only by the beats without it, or with Recent.
	Only []int64
	// Recent, with Only, also reads the tasks the worker holds whose
	// lease runs past now: a claim whose reply was lost is among them for
	// a lease after it. They are found through a range of the lease index
	// that spans one lease of claims, however long the xmin is held (the
	// rescuer takes over a task whose lease ran out).
	Recent bool
	// LockWait bounds how long the beat waits, in all, for the locks of
	// the due rows it could not lock at once (see WorkerHeartbeat); zero
	// leaves them to the next beat.
	LockWait time.Duration
}

// WorkerHeartbeat marks the worker alive and extends the leases of the
// tasks it holds (those due, see RenewWithin). It returns the ids of the
// tasks it still holds, so the caller can stop handlers whose task was
// taken away.
//
// Renewing takes the rows' locks. The beat first renews every due row it
// can lock at once, skipping the rows another transaction holds: a
// completion, park or resume batch of this worker locks its rows in plan
// order, not id order, and a beat that waited for one while holding
// others could deadlock with it. Then it renews each skipped row alone,
// waiting for its lock (up to LockWait in all) while holding no other:
// one task row can be locked most of the time by its own handler (a
// handler that spawns child runs or journals steps back to back locks
// its row FOR SHARE in each), and a beat that only skipped could miss
// it until its lease ran out.
func (s *Store) WorkerHeartbeat(ctx context.Context, p WorkerHeartbeatParams) ([]int64, error) {
	var rows []struct {
		ID      int64 `bun:"id"`
		Skipped bool  `bun:"skipped"`
	}
	renewMs := int64(-1) // every held lease
	if p.RenewWithin > 0 {
		renewMs = p.RenewWithin.Milliseconds()
	}
	name, args := "WorkerHeartbeatAll", []any{p.WorkerID, p.WorkerID}
	if p.Only != nil {
		name, args = "WorkerHeartbeatOnly", []any{p.WorkerID, pgArray(p.Only), p.WorkerID}
		if p.Recent {
			name, args = "WorkerHeartbeatOnlyRecent", append(args, p.WorkerID)
		}
	}
	args = append(args, renewMs, renewMs, p.WorkerID, p.Lease.Milliseconds())
	err := s.raw(statement(name), args...).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("heartbeat worker %d: %w", p.WorkerID, err)
	}
	ids := make([]int64, len(rows))
	var skipped []int64
	for i, r := range rows {
		ids[i] = r.ID
		if r.Skipped {
			skipped = append(skipped, r.ID)
		}
	}
	if err := s.renewLocked(ctx, p, skipped); err != nil {
		return nil, err
	}
	return ids, nil
}

// renewLocked renews the leases of the tasks a beat skipped, one row per
// statement, each waiting for its row's lock while the beat holds no
// other (so no deadlock), for up to p.LockWait in all. A row still
// locked then is left for the next beat.
func (s *Store) renewLocked(ctx context.Context, p WorkerHeartbeatParams, ids []int64) error {
	if len(ids) == 0 || p.LockWait <= 0 {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, p.LockWait)
	defer cancel()
	for _, id := range ids {
		_, err := s.exec(wait, `UPDATE ?schema.tasks SET lease_expires_at = now() + ? * interval '1 millisecond'
	WHERE id = ? AND worker_id = ? AND status IN ('running', 'deferred')`, p.Lease.Milliseconds(), id, p.WorkerID)
		if err != nil {
			if wait.Err() != nil && ctx.Err() == nil {
				return nil // waited long enough: the next beat tries again
			}
			return fmt.Errorf("heartbeat worker %d: renew task %d: %w", p.WorkerID, id, err)
		}
	}
	return nil
}

// WorkerSetStatus records a worker's lifecycle status.
func (s *Store) WorkerSetStatus(ctx context.Context, workerID int64, status string) error {
	_, err := s.exec(ctx, `UPDATE ?schema.workers SET status = ?,
		stopped_at = CASE WHEN ? IN ('stopped', 'lost') THEN now() END WHERE id = ?`, status, status, workerID)
	if err != nil {
		return fmt.Errorf("set worker %d %s: %w", workerID, status, err)
	}
	return nil
}

// WorkerMarkLost marks running workers whose heartbeat is older than
// olderThan as lost and returns how many.
func (s *Store) WorkerMarkLost(ctx context.Context, olderThan time.Duration) (int64, error) {
	res, err := s.exec(ctx, `UPDATE ?schema.workers SET status = 'lost', stopped_at = now()
		WHERE status IN ('running', 'stopping') AND heartbeat_at < now() - ? * interval '1 millisecond'`, olderThan.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("mark lost workers: %w", err)
	}
	return res.RowsAffected()
}

// WorkerList returns workers, live ones first.
func (s *Store) WorkerList(ctx context.Context, limit int) ([]Worker, error) {
	var out []Worker
	err := s.raw(`SELECT * FROM ?schema.workers ORDER BY status = 'running' DESC, heartbeat_at DESC LIMIT ?`, limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}

// QueueEnsure creates queue rows that do not exist yet. Queue rows are
// never deleted, so the store remembers the names whose rows it saw
// committed and writes only the others: an enqueue into a known queue
// costs no statement. Inside a transaction it remembers nothing (the
// transaction may roll back).
func (s *Store) QueueEnsure(ctx context.Context, names []string) error {
	unknown := make([]string, 0, len(names))
	for _, n := range names {
		if _, ok := s.queues.Load(n); !ok && !slices.Contains(unknown, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	if _, err := s.exec(ctx, `INSERT INTO ?schema.queues (name) SELECT unnest(?::text[]) ON CONFLICT DO NOTHING`, array(unknown)); err != nil {
		return fmt.Errorf("create queues: %w", err)
	}
	if !s.inTx {
		for _, n := range unknown {
			s.queues.Store(n, struct{}{})
		}
	}
	return nil
}

// QueueSetPaused pauses or resumes a queue and tells engines.
func (s *Store) QueueSetPaused(ctx context.Context, name string, paused bool) error {
	return s.queueUpdate(ctx, name, `UPDATE ?schema.queues SET paused = ?, updated_at = now() WHERE name = ?`, paused)
}

// QueueSetCap sets a queue's cluster-wide cap on running tasks (nil: none).
func (s *Store) QueueSetCap(ctx context.Context, name string, maxRunning *int) error {
	return s.queueUpdate(ctx, name, `UPDATE ?schema.queues SET max_running = ?, updated_at = now() WHERE name = ?`, maxRunning)
}

// queueUpdate runs update, a statement that sets v on the row of queue
// name (arguments: v, name), and tells engines.
func (s *Store) queueUpdate(ctx context.Context, name, update string, v any) error {
	return s.InTx(ctx, func(tx *Store) error {
		res, err := tx.exec(ctx, update, v, name)
		if err != nil {
			return fmt.Errorf("update queue %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("queue %q: %w", name, ErrNotFound)
		}
		args, err := s.queueChangedArgs(name)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, queueChangedNotify, args...); err != nil {
			return fmt.Errorf("notify change of queue %s: %w", name, err)
		}
		return nil
	})
}

// QueueGet returns one queue.
func (s *Store) QueueGet(ctx context.Context, name string) (*Queue, error) {
	var q Queue
	if err := s.raw(`SELECT * FROM ?schema.queues WHERE name = ?`, name).Scan(ctx, &q); err != nil {
		return nil, notFound(err)
	}
	return &q, nil
}

// QueueList returns all queues by name.
func (s *Store) QueueList(ctx context.Context) ([]Queue, error) {
	var out []Queue
	if err := s.raw(`SELECT * FROM ?schema.queues ORDER BY name`).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}
