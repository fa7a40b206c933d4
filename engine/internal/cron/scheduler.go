package cron

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
)

// Catch-up policies: what a schedule does with fires missed while no
// engine ran. The engine's CatchUp* constants document them.
const (
	CatchUpSkip = "skip"
	CatchUpOne  = "one"
	CatchUpAll  = "all"
)

const (
	// LeaseName names the scheduler's row in the leases table.
	LeaseName = "scheduler"
	// minSkipTolerance is the smallest lateness that makes a fire missed.
	minSkipTolerance = time.Minute
	// dueBatch is how many due schedules one query fetches.
	dueBatch = 100
)

// Store is what the scheduler needs of the store. A fire's transaction
// works on the *store.Store that InTx hands it.
type Store interface {
	LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error)
	LeaseRelease(ctx context.Context, name, holder string) error
	ScheduleDue(ctx context.Context, p *store.ScheduleDueParams) ([]int64, error)
	InTx(ctx context.Context, fn func(tx *store.Store) error) error
}

// Fire is one run a schedule fire asks for.
type Fire struct {
	Workflow string
	Input    json.RawMessage
	// Key is the run's idempotency key, "schedule:<id>:<fire time RFC 3339>".
	Key string
}

// Run is the run enqueued for a Fire.
type Run struct {
	ID int64
	// Existing is set when the key matched a live run (another leader
	// fired this time already).
	Existing bool
}

// EnqueueFunc enqueues the runs of fires in the transaction tx, one Run
// per Fire in order.
type EnqueueFunc func(ctx context.Context, tx *store.Store, fires []Fire) ([]Run, error)

// Config builds a Scheduler.
type Config struct {
	Store   Store
	Enqueue EnqueueFunc
	// Active reports whether this engine can fire anything (it registers
	// a workflow); one that cannot does not compete for the lease. Nil
	// means always.
	Active func() bool
	// Worker names this engine; the lease holder is Worker plus a random
	// suffix.
	Worker string
	// Interval is the time between two ticks. Fires later than
	// max(1 minute, 2×Interval) are missed (see CatchUpSkip).
	Interval time.Duration
	// LeaderLease is how long a tick's lease lasts.
	LeaderLease time.Duration
	Clock       func() time.Time
	Logger      *slog.Logger
	Health      *backoff.Health
}

// Scheduler fires due schedules while this engine holds the leader lease
// (the "scheduler" row of leases). Each fire is one transaction that locks
// the schedule row, inserts the runs with the key
// "schedule:<id>:<fire time RFC 3339>" and moves next_fire_at with
// compare-and-set, so two engines that both think they lead can never
// fire a time twice. Start and Stop run its ticks; Release gives the
// lease up after Stop.
type Scheduler struct {
	*maint.Service
	cfg    Config
	holder string // this engine's identity in the leases table

	mu     sync.Mutex
	leader bool
	warned map[int64]string // schedule id -> last fire error logged, to log each once
}

// New returns a scheduler service called "scheduler".
func New(cfg Config) *Scheduler {
	s := &Scheduler{cfg: cfg, holder: cfg.Worker + "/" + rand.Text()[:10], warned: map[int64]string{}}
	s.Service = maint.NewService("scheduler", cfg.Interval, cfg.Health, s.RunOnce)
	return s
}

// Holder returns this engine's identity in the leases table.
func (s *Scheduler) Holder() string { return s.holder }

// RunOnce takes or renews the leader lease and, when it holds it, fires
// every schedule due at the clock's now. An engine that is not Active
// does not compete for the lease.
func (s *Scheduler) RunOnce(ctx context.Context) error {
	if s.cfg.Active != nil && !s.cfg.Active() {
		return nil
	}
	now := s.cfg.Clock()
	leader, err := s.cfg.Store.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: LeaseName, Holder: s.holder, Now: now, TTL: s.cfg.LeaderLease})
	if err != nil {
		return fmt.Errorf("scheduler lease: %w", err)
	}
	s.setLeader(ctx, leader)
	if !leader {
		return nil
	}
	return s.FireDue(ctx, now)
}

// FireDue fires every schedule due at now, each in its own transaction,
// whoever holds the lease.
func (s *Scheduler) FireDue(ctx context.Context, now time.Time) error {
	tolerance := max(minSkipTolerance, 2*s.cfg.Interval)
	var after int64
	for {
		ids, err := s.cfg.Store.ScheduleDue(ctx, &store.ScheduleDueParams{Now: now, AfterID: after, Limit: dueBatch})
		if err != nil {
			return err
		}
		for _, id := range ids {
			err := s.fire(ctx, id, now, tolerance)
			if err != nil && (ctx.Err() != nil || store.IsUnavailable(err)) {
				return err // the service backs off and logs it once
			}
			s.noteError(ctx, id, err)
		}
		if len(ids) < dueBatch {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// fire handles one due schedule in one transaction: it locks the row
// (skipping it when another engine holds it), enqueues the runs its
// catch-up policy asks for, and moves next_fire_at past now.
func (s *Scheduler) fire(ctx context.Context, id int64, now time.Time, tolerance time.Duration) error {
	type fired struct {
		at  time.Time
		run Run
	}
	var (
		sc      *store.Schedule
		done    []fired
		next    time.Time
		skipped bool // every due fire was dropped
	)
	err := s.cfg.Store.InTx(ctx, func(tx *store.Store) error {
		var err error
		sc, err = tx.ScheduleLockDue(ctx, id, now)
		if errors.Is(err, store.ErrNotFound) {
			sc = nil // fired, paused or deleted meanwhile, or in another engine's hands
			return nil
		}
		if err != nil {
			return err
		}
		spec, err := Parse(sc.Expression, sc.Timezone)
		if err != nil {
			return fmt.Errorf("stored schedule: %w", err)
		}
		keep := 1
		if sc.CatchUp == CatchUpAll {
			keep = max(sc.MaxCatchUp, 1)
		}
		var due []time.Time
		due, next, err = spec.Fires(sc.NextFireAt, now, keep)
		if err != nil {
			return err
		}
		if sc.CatchUp == CatchUpSkip && len(due) > 0 && now.Sub(due[len(due)-1]) > tolerance {
			due = nil
		}
		skipped = len(due) == 0
		var runs []Run
		if len(due) > 0 {
			fires := make([]Fire, len(due))
			for i, at := range due {
				fires[i] = Fire{Workflow: sc.Workflow, Input: sc.Input,
					Key: fmt.Sprintf("schedule:%d:%s", sc.ID, at.UTC().Format(time.RFC3339))}
			}
			if runs, err = s.cfg.Enqueue(ctx, tx, fires); err != nil {
				return err
			}
		}
		adv := &store.ScheduleAdvanceParams{ID: sc.ID, OldNextFireAt: sc.NextFireAt, NextFireAt: next}
		if len(runs) > 0 {
			last := due[len(due)-1]
			adv.LastFireAt, adv.LastRunID = &last, &runs[len(runs)-1].ID
		}
		ok, err := tx.ScheduleAdvance(ctx, adv)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("next_fire_at changed under the row lock")
		}
		done = make([]fired, len(runs))
		for i, r := range runs {
			done[i] = fired{at: due[i], run: r}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fire schedule %d: %w", id, err)
	}
	if sc == nil {
		return nil
	}
	log := s.cfg.Logger
	for _, f := range done {
		log.InfoContext(ctx, "schedule fired", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.String("workflow", sc.Workflow), slog.Time("fire_time", f.at), slog.Int64("run", f.run.ID),
			slog.Bool("existing", f.run.Existing), slog.Time("next_fire_at", next))
	}
	if skipped {
		log.InfoContext(ctx, "schedule skipped missed fires", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.String("catch_up", sc.CatchUp), slog.Time("missed_since", sc.NextFireAt), slog.Time("next_fire_at", next))
	}
	return nil
}

// noteError logs a schedule's fire error once until it changes or clears,
// so a schedule this engine cannot fire (say, of a workflow it does not
// register) does not log every tick. The schedule stays due.
func (s *Scheduler) noteError(ctx context.Context, id int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.warned, id)
		return
	}
	if s.warned[id] == err.Error() {
		return
	}
	s.warned[id] = err.Error()
	s.cfg.Logger.WarnContext(ctx, "schedule not fired: it stays due", slog.Int64("schedule_id", id), slog.Any("error", err))
}

func (s *Scheduler) setLeader(ctx context.Context, leader bool) {
	s.mu.Lock()
	changed := s.leader != leader
	s.leader = leader
	s.mu.Unlock()
	if changed && leader {
		s.cfg.Logger.InfoContext(ctx, "scheduler leadership acquired", slog.String("holder", s.holder))
	} else if changed {
		s.cfg.Logger.InfoContext(ctx, "scheduler leadership lost", slog.String("holder", s.holder))
	}
}

// Release gives the leader lease up, if this engine holds it, so another
// engine takes over at its next tick instead of when the lease expires.
// Call it after Stop. Safe twice.
func (s *Scheduler) Release(ctx context.Context) error {
	s.mu.Lock()
	s.leader = false
	s.mu.Unlock()
	if err := s.cfg.Store.LeaseRelease(ctx, LeaseName, s.holder); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	return nil
}
