package maint

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

const (
	// pruneEvery is the time between two pruner passes.
	pruneEvery = 10 * time.Minute
	// pruneBatch is how many runs one delete statement takes.
	pruneBatch = 1000
	// FlowKeyPruneEvery is how often, across the cluster, idle flow keys
	// are pruned: each prune reads all of tasks (see store.FlowKeyPrune).
	FlowKeyPruneEvery = 6 * time.Hour
	// FlowKeyPruneLease names the lease that makes it once across the
	// cluster.
	FlowKeyPruneLease = "flow-key-prune"
	// flowKeyPruneBatch is how many idle keys one prune takes at most.
	flowKeyPruneBatch = 10_000
	// flowKeyMinIdle is the least time a key stays unused before it is
	// pruned, whatever the retention.
	flowKeyMinIdle = 24 * time.Hour
)

// PrunerStore is what the pruner needs of the store.
type PrunerStore interface {
	RunPrune(ctx context.Context, olderThan time.Duration, batch int) (int64, error)
	FlowKeyPrune(ctx context.Context, idle time.Duration, batch int) (int64, error)
	LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (bool, error)
}

// PrunerConfig builds a Pruner.
type PrunerConfig struct {
	Store PrunerStore
	// Retention is how long finished runs are kept; negative keeps them
	// for ever.
	Retention time.Duration
	Logger    *slog.Logger
	Health    *backoff.Health
	// Clock is the time of the flow-key prune's lease (time.Now when nil).
	Clock func() time.Time
}

// Pruner deletes runs finished longer ago than the retention.
type Pruner struct {
	*Service
	cfg PrunerConfig
}

// NewPruner returns a pruner service called "pruner", run every ten
// minutes.
func NewPruner(cfg PrunerConfig) *Pruner {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	p := &Pruner{cfg: cfg}
	p.Service = NewService("pruner", pruneEvery, cfg.Health, p.RunOnce)
	return p
}

// RunOnce deletes runs finished longer ago than the retention, by the
// database's clock, with their tasks and events. Then, when no engine of
// the cluster has in the last FlowKeyPruneEvery, it deletes the flow
// keys no task refers to any more that have been idle for the retention
// (at least a day; see store.FlowKeyPrune).
func (p *Pruner) RunOnce(ctx context.Context) error {
	if p.cfg.Retention < 0 {
		return nil
	}
	n, err := p.cfg.Store.RunPrune(ctx, p.cfg.Retention, pruneBatch)
	if err != nil {
		return err
	}
	if n > 0 {
		p.cfg.Logger.InfoContext(ctx, "pruned finished runs", slog.Int64("runs", n))
	}
	// A holder of its own for each try: the lease is taken only once the
	// last prune's has expired, never renewed.
	took, err := p.cfg.Store.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: FlowKeyPruneLease,
		Holder: "pruner/" + rand.Text()[:10], Now: p.cfg.Clock(), TTL: FlowKeyPruneEvery})
	if err != nil || !took {
		return err
	}
	keys, err := p.cfg.Store.FlowKeyPrune(ctx, max(p.cfg.Retention, flowKeyMinIdle), flowKeyPruneBatch)
	if keys > 0 {
		p.cfg.Logger.InfoContext(ctx, "pruned idle flow keys", slog.Int64("keys", keys))
	}
	return err
}
