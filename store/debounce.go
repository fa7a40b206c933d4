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
// transaction: the function run_debounce (migration 035), which the SQL
// API's enqueue calls too. The enqueues of a key take turns on an
// advisory lock held until commit, so that they see each other's runs;
// the run holding the key has its input replaced, else p is inserted
// and marked with the key.
func (s *Store) runDebounce(ctx context.Context, p RunInsertParams) (RunInserted, error) {
	d := *p.Debounce
	if len(p.After) > 0 {
		return RunInserted{}, fmt.Errorf("%w: debounce key %q: a debounced or singleton run cannot wait for other runs (After)", ErrInvalidValue, d.Key)
	}
	p.Debounce = nil
	runs, templates, err := runInsertArgs([]RunInsertParams{p}, nil)
	if err != nil {
		return RunInserted{}, err
	}
	// The one run, not the array run_insert takes.
	run := runs[1 : len(runs)-1]
	var out []RunInserted
	if err := s.scanPrepared(ctx, &out, s.query("RunDebounce"), jsonArg(run), jsonArg(templates), d.Key,
		d.Wait.Microseconds(), d.MaxWait.Microseconds(), d.Singleton, !s.noWake); err != nil {
		return RunInserted{}, fmt.Errorf("debounce key %q: %w", d.Key, err)
	}
	if len(out) != 1 {
		return RunInserted{}, fmt.Errorf("debounce key %q: %d rows", d.Key, len(out))
	}
	return out[0], nil
}
