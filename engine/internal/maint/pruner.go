package maint

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

const (
	// pruneEvery is the time between two pruner passes.
	pruneEvery = 10 * time.Minute
	// pruneBatch is how many runs one delete statement takes.
	pruneBatch = 1000
)

// PrunerStore is what the pruner needs of the store.
type PrunerStore interface {
	RunPrune(ctx context.Context, olderThan time.Duration, batch int) (int64, error)
}

// PrunerConfig builds a Pruner.
type PrunerConfig struct {
	Store PrunerStore
	// Retention is how long finished runs are kept; negative keeps them
	// for ever.
	Retention time.Duration
	Logger    *slog.Logger
	Health    *backoff.Health
}

// Pruner deletes runs finished longer ago than the retention.
type Pruner struct {
	*Service
	cfg PrunerConfig
}

// NewPruner returns a pruner service called "pruner", run every ten
// minutes.
func NewPruner(cfg PrunerConfig) *Pruner {
	p := &Pruner{cfg: cfg}
	p.Service = NewService("pruner", pruneEvery, cfg.Health, p.RunOnce)
	return p
}

// RunOnce deletes runs finished longer ago than the retention, by the
// database's clock, with their tasks and events.
func (p *Pruner) RunOnce(ctx context.Context) error {
	if p.cfg.Retention < 0 {
		return nil
	}
	n, err := p.cfg.Store.RunPrune(ctx, p.cfg.Retention, pruneBatch)
	if err == nil && n > 0 {
		p.cfg.Logger.InfoContext(ctx, "pruned finished runs", slog.Int64("runs", n))
	}
	return err
}
