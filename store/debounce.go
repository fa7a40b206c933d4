package store

import (
	"context"
	"fmt"
	"time"
)

// This file holds the enqueue of debounced and singleton runs
// (RunInsertParams.Debounce; run_rows.debounce_*, migration 034).

// Debounce makes an enqueue replace the queued run of its key instead of
// adding one. The run that holds Key is the newest run enqueued with it,
// while none of its tasks was ever claimed (every task ready or
// not_started, attempt 0); once one was, the key is free and the next
// enqueue inserts a new run. An enqueue that finds a holder replaces its
// input (latest wins) and returns it as existing; a debounce also moves
// its start to least(now + Wait, first enqueue + MaxWait), by the
// database clock. A Singleton leaves the holder's start where it was.
type Debounce struct {
	Key       string
	Wait      time.Duration
	MaxWait   time.Duration
	Singleton bool
}

// debounceLockClass is the first key of the advisory lock the enqueues of
// one debounce key take turns on (the second is the key's hash).
const debounceLockClass = 1684366958 // "debn"

// runInsertDebounced inserts ps in one transaction: those without a
// Debounce in one RunInsertMany, those with one each in turn
// (runDebounce).
func (s *Store) runInsertDebounced(ctx context.Context, ps []RunInsertParams) ([]RunInserted, error) {
	out := make([]RunInserted, len(ps))
	err := s.InTx(ctx, func(tx *Store) error {
		var plain []RunInsertParams
		var at []int // at[j]: the index in ps of plain[j]
		for i, p := range ps {
			if p.Debounce == nil {
				plain, at = append(plain, p), append(at, i)
			}
		}
		if len(plain) > 0 {
			rs, err := tx.RunInsertMany(ctx, plain)
			if err != nil {
				return err
			}
			for j, r := range rs {
				r.Ord = at[j]
				out[at[j]] = r
			}
		}
		for i, p := range ps {
			if p.Debounce == nil {
				continue
			}
			r, err := tx.runDebounce(ctx, p)
			if err != nil {
				return fmt.Errorf("run %d: %w", i, err)
			}
			r.Ord = i
			out[i] = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runDebounce enqueues p, whose Debounce is set, in the store's
// transaction: it waits for the key's turn (an advisory lock held until
// commit, so that concurrent enqueues of a key see each other's runs),
// replaces the input of the run holding the key if there is one, else
// inserts the run and marks it with the key.
func (s *Store) runDebounce(ctx context.Context, p RunInsertParams) (RunInserted, error) {
	d := *p.Debounce
	if _, err := s.exec(ctx, `SELECT pg_advisory_xact_lock(?, hashtext(?))`, debounceLockClass, d.Key); err != nil {
		return RunInserted{}, fmt.Errorf("debounce key %q: lock: %w", d.Key, err)
	}
	wait, limit := d.Wait.Microseconds(), d.MaxWait.Microseconds()
	var holder []struct {
		ID int64 `bun:"id"`
	}
	if err := s.raw(`SELECT id FROM ?schema.run_rows WHERE debounce_key = ? ORDER BY id DESC LIMIT 1`, d.Key).Scan(ctx, &holder); err != nil {
		return RunInserted{}, fmt.Errorf("debounce key %q: read: %w", d.Key, err)
	}
	if len(holder) == 1 {
		id := holder[0].ID
		// The tasks locked, as a claim or a transition locks them: a claim
		// that took one first is seen; a claim after this commit sees the
		// new start.
		var tasks []struct {
			Status  string `bun:"status"`
			Attempt int    `bun:"attempt"`
		}
		if err := s.raw(`SELECT status, attempt FROM ?schema.tasks
			WHERE id = ANY((SELECT task_ids FROM ?schema.run_rows WHERE id = ?)::bigint[]) ORDER BY id FOR UPDATE`, id).Scan(ctx, &tasks); err != nil {
			return RunInserted{}, fmt.Errorf("debounce key %q: lock run %d: %w", d.Key, id, err)
		}
		queued := len(tasks) > 0
		for _, t := range tasks {
			queued = queued && t.Attempt == 0 && (t.Status == "ready" || t.Status == "not_started")
		}
		if queued {
			if _, err := s.exec(ctx, `UPDATE ?schema.run_rows SET input = ?,
				debounce_at = CASE WHEN ? THEN debounce_at ELSE least(statement_timestamp() + ? * interval '1 microsecond', debounce_until) END
				WHERE id = ?`, jsonArg(p.Input), d.Singleton, wait, id); err != nil {
				return RunInserted{}, fmt.Errorf("debounce key %q: replace run %d: %w", d.Key, id, err)
			}
			if !d.Singleton {
				if err := s.debounceTasks(ctx, id); err != nil {
					return RunInserted{}, fmt.Errorf("debounce key %q: run %d: %w", d.Key, id, err)
				}
			}
			return RunInserted{ID: id, Existing: true}, nil
		}
	}
	p.Debounce = nil
	rs, err := s.RunInsertMany(ctx, []RunInsertParams{p})
	if err != nil {
		return RunInserted{}, err
	}
	if rs[0].Existing { // its idempotency key was held: that run, unchanged
		return rs[0], nil
	}
	id := rs[0].ID
	if _, err := s.exec(ctx, `UPDATE ?schema.run_rows SET debounce_key = ?,
		debounce_at = CASE WHEN ? THEN NULL ELSE least(statement_timestamp() + ? * interval '1 microsecond', statement_timestamp() + ? * interval '1 microsecond') END,
		debounce_until = CASE WHEN ? THEN NULL ELSE statement_timestamp() + ? * interval '1 microsecond' END
		WHERE id = ?`, d.Key, d.Singleton, wait, limit, d.Singleton, limit, id); err != nil {
		return RunInserted{}, fmt.Errorf("debounce key %q: mark run %d: %w", d.Key, id, err)
	}
	if !d.Singleton {
		if err := s.debounceTasks(ctx, id); err != nil {
			return RunInserted{}, fmt.Errorf("debounce key %q: run %d: %w", d.Key, id, err)
		}
	}
	return rs[0], nil
}

// debounceTasks makes the ready tasks of run id claimable from its
// debounce_at on.
func (s *Store) debounceTasks(ctx context.Context, id int64) error {
	_, err := s.exec(ctx, `UPDATE ?schema.tasks t SET available_at = r.debounce_at
		FROM ?schema.run_rows r WHERE r.id = ? AND t.id = ANY(r.task_ids) AND t.status = 'ready'`, id)
	return err
}
