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
	// summarizeEvery is the time between two summaries of the open
	// partitions' BRIN indexes: a task's history read scans the pages
	// written since the last one.
	summarizeEvery = 5 * time.Second
)

// PartitionerStore is what the partitioner needs of the store.
type PartitionerStore interface {
	HistoryPartitionEnsure(ctx context.Context, from time.Time, days int) ([]string, error)
	HistoryPartitionDrop(ctx context.Context, olderThan time.Duration) ([]store.HistoryPartitionDropped, error)
	HistoryPartitionIndex(ctx context.Context) ([]string, error)
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
// next PartitionsAhead days' exist, those whose day is over get their
// B-tree by task (see store.HistoryPartitionIndex), and whole partitions
// past the retention are dropped (the events of runs still kept are
// copied back first; see store.HistoryPartitionDrop).
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

// RunOnce makes the missing partitions from today on, drops those past
// the retention, then builds the B-trees of those whose day is over (last:
// a build waits for every older transaction). Inserts never wait for it:
// rows no partition covers go to the DEFAULT partition.
func (p *Partitioner) RunOnce(ctx context.Context) error {
	created, err := p.cfg.Store.HistoryPartitionEnsure(ctx, p.cfg.Clock(), 1+PartitionsAhead)
	for _, name := range created {
		p.cfg.Logger.InfoContext(ctx, "created history partition", slog.String("partition", name))
	}
	if err != nil {
		return err
	}
	if p.cfg.Retention >= 0 {
		dropped, err := p.cfg.Store.HistoryPartitionDrop(ctx, p.cfg.Retention)
		for _, d := range dropped {
			p.cfg.Logger.InfoContext(ctx, "dropped history partition", slog.String("partition", d.Name), slog.Int64("kept_events", d.Kept))
		}
		if err != nil {
			return err
		}
	}
	built, err := p.cfg.Store.HistoryPartitionIndex(ctx)
	for _, name := range built {
		p.cfg.Logger.InfoContext(ctx, "indexed history partition by task", slog.String("index", name))
	}
	return err
}

// SummarizerStore is what the summarizer needs of the store.
type SummarizerStore interface {
	HistorySummarize(ctx context.Context) (int64, error)
}

// Summarizer summarizes the new page ranges of the open history
// partitions' BRIN indexes (see store.HistorySummarize), so a task's
// history read scans only the pages written since its last pass. Its
// RunOnce summarizes the ranges written since the last pass.
type Summarizer struct{ statementService }

// NewSummarizer returns a summarizer service called "summarize", run
// every five seconds.
func NewSummarizer(st SummarizerStore, health *backoff.Health) *Summarizer {
	return &Summarizer{newStatementService("summarize", summarizeEvery, health, st.HistorySummarize)}
}
