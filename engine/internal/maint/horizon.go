package maint

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

const (
	// horizonEvery is the time between two looks at the vacuum horizon,
	// and heldEvery while a snapshot holds it: the hot tables are
	// vacuumed within about a second of its end.
	horizonEvery = 10 * time.Second
	heldEvery    = time.Second
	// HoldAfter is how long the horizon must stay at one snapshot before
	// the watch calls it held: autovacuum's default naptime, the delay a
	// held snapshot adds to the cleanup once it is gone.
	HoldAfter = time.Minute
)

// HorizonStore is what the horizon watch needs of the store.
type HorizonStore interface {
	Horizon(ctx context.Context) (store.Horizon, error)
	SeesAllSessions(ctx context.Context) (bool, error)
	VacuumHot(ctx context.Context) ([]store.Vacuumed, error)
}

// HorizonConfig builds a HorizonWatch.
type HorizonConfig struct {
	Store  HorizonStore
	Clock  func() time.Time
	Logger *slog.Logger
	Health *backoff.Health
	// OnHorizon, when set, is given each reading, and how long the
	// horizon has stayed at its snapshot (zero when it just moved).
	OnHorizon func(h store.Horizon, heldFor time.Duration)
}

// HorizonWatch looks at the vacuum horizon every ten seconds (every
// second while a snapshot holds it). When one
// snapshot has held it for HoldAfter it says so (a warning naming the
// holder), and when that snapshot goes it vacuums the hot tables at once
// (store.VacuumHot) rather than leave their dead row versions, and the
// slower claims they cause, to autovacuum's next round.
type HorizonWatch struct {
	*Service
	cfg HorizonConfig

	mu      sync.Mutex
	checked bool      // the role's privileges were looked at
	xmin    string    // the horizon at the last look
	since   time.Time // when the horizon was first seen at xmin
	held    bool      // xmin has held for HoldAfter
	pending bool      // a hold ended and the hot tables are not vacuumed yet
}

// NewHorizonWatch returns the horizon watch, a service called "horizon".
func NewHorizonWatch(cfg HorizonConfig) *HorizonWatch {
	w := &HorizonWatch{cfg: cfg}
	w.Service = NewService("horizon", horizonEvery, cfg.Health, w.RunOnce)
	w.Pace(w.LookEvery)
	return w
}

// LookEvery is the time until the next look: a second while a snapshot
// holds the horizon, ten otherwise.
func (w *HorizonWatch) LookEvery() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held {
		return heldEvery
	}
	return horizonEvery
}

// RunOnce looks at the horizon once, and vacuums the hot tables when a
// hold has ended since (or a vacuum after one failed before).
func (w *HorizonWatch) RunOnce(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.cfg.Logger
	if !w.checked {
		all, err := w.cfg.Store.SeesAllSessions(ctx)
		if err != nil {
			return err
		}
		w.checked = true
		if !all {
			log.InfoContext(ctx, "the horizon watch sees only this role's snapshots: grant it pg_read_all_stats (or pg_monitor) to watch every session's")
		}
	}
	h, err := w.cfg.Store.Horizon(ctx)
	if err != nil {
		return err
	}
	now := w.cfg.Clock()
	switch {
	case h.Xmin != w.xmin || h.Xmin == "":
		if w.held {
			log.InfoContext(ctx, "the snapshot that held back vacuum is gone: vacuuming the hot tables",
				slog.Duration("held_for", now.Sub(w.since).Round(time.Second)))
			w.pending = true
		}
		w.xmin, w.since, w.held = h.Xmin, now, false
	case !w.held && now.Sub(w.since) >= HoldAfter:
		w.held = true
		attrs := []any{slog.String("kind", h.Kind), slog.String("holder", h.Holder),
			slog.Int64("xmin_age", h.Age), slog.Duration("seen_for", now.Sub(w.since).Round(time.Second))}
		if !h.Since.IsZero() {
			attrs = append(attrs, slog.Time("transaction_start", h.Since))
		}
		if h.Inactive {
			// Nobody is connected to the slot: it holds until dropped.
			attrs = append(attrs, slog.Bool("slot_inactive", true))
		}
		log.WarnContext(ctx, "a snapshot holds back vacuum: dead row versions pile up in every table until it ends", attrs...)
	}
	if w.cfg.OnHorizon != nil {
		w.cfg.OnHorizon(h, now.Sub(w.since))
	}
	if !w.pending {
		return nil
	}
	done, err := w.cfg.Store.VacuumHot(ctx)
	if errors.Is(err, store.ErrVacuumBusy) {
		// Another engine vacuums them.
		w.pending = false
		return nil
	}
	for _, v := range done {
		log.InfoContext(ctx, "vacuumed after a held snapshot", slog.String("table", v.Table),
			slog.Int64("dead_tuples", v.Dead), slog.Duration("took", v.Took.Round(time.Millisecond)))
	}
	if err != nil {
		return err
	}
	w.pending = false
	return nil
}
