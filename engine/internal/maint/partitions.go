package maint

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

const (
	// partitionEvery is the time between two passes of the partitioner.
	partitionEvery = 10 * time.Minute
	// PartitionsAhead is how many days after today have their history
	// partition made in advance.
	PartitionsAhead = 3
)

// PartitionerStore is what the partitioner needs of the store.
type PartitionerStore interface {
	HistoryPartitionEnsure(ctx context.Context, from time.Time, days int) ([]string, error)
	HistoryPartitionDrop(ctx context.Context, olderThan time.Duration) ([]store.HistoryPartitionDropped, error)
}

// PartitionerConfig builds a Partitioner.
type PartitionerConfig struct {
	Store PartitionerStore
	// Retention is how long finished runs are kept: partitions of
	// task_events that ended longer ago are dropped. Negative keeps them
	// for ever.
	Retention time.Duration
	// Clock tells the day partitions are made from.
	Clock  func() time.Time
	Logger *slog.Logger
	Health *backoff.Health
}

// Partitioner keeps the daily partitions of task_events: today's and the
// next PartitionsAhead days' exist, and whole partitions past the
// retention are dropped (the events of runs still kept are copied back
// first; see store.HistoryPartitionDrop).
type Partitioner struct {
	*Service
	cfg PartitionerConfig
}

// NewPartitioner returns a partitioner service called "partitions", run
// every ten minutes.
func NewPartitioner(cfg PartitionerConfig) *Partitioner {
	p := &Partitioner{cfg: cfg}
	p.Service = NewService("partitions", partitionEvery, cfg.Health, p.RunOnce)
	return p
}

// RunOnce makes the missing partitions from today on, then drops those
// past the retention. Inserts never wait for it: rows no partition covers
// go to the DEFAULT partition.
func (p *Partitioner) RunOnce(ctx context.Context) error {
	created, err := p.cfg.Store.HistoryPartitionEnsure(ctx, p.cfg.Clock(), 1+PartitionsAhead)
	for _, name := range created {
		p.cfg.Logger.InfoContext(ctx, "created history partition", slog.String("partition", name))
	}
	if err != nil {
		return err
	}
	if p.cfg.Retention < 0 {
		return nil
	}
	dropped, err := p.cfg.Store.HistoryPartitionDrop(ctx, p.cfg.Retention)
	for _, d := range dropped {
		p.cfg.Logger.InfoContext(ctx, "dropped history partition", slog.String("partition", d.Name), slog.Int64("kept_events", d.Kept))
	}
	return err
}
