package maint

import (
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/lifecycle"
	"github.com/cairnhq/cairn/store"
)

// UpkeepStore is what the upkeep services run, together.
type UpkeepStore interface {
	RescuerStore
	PrunerStore
	PartitionerStore
	SummarizerStore
	CountFolderStore
	HorizonStore
	SettlerStore
}

// UpkeepConfig is the setup of the cluster's upkeep (see Upkeep).
type UpkeepConfig struct {
	Store                            UpkeepStore
	Lease, RescueInterval, Retention time.Duration
	NoHorizonWatch                   bool
	Clock                            func() time.Time
	Logger                           *slog.Logger
	Health                           *backoff.Health
	OnMoves                          func(...[]store.Moved)
	OnHorizon                        func(h store.Horizon, heldFor time.Duration)
}

// Upkeep returns the upkeep services every engine runs, worker or not:
// the rescuer, the pruner, the partitioner, the summarizer, the count
// folder, the settler and, unless NoHorizonWatch, the horizon watch. Each does its
// share of the cluster's upkeep (leader-elected or harmless to run
// twice; see each).
func Upkeep(c UpkeepConfig) []lifecycle.Service {
	out := []lifecycle.Service{
		NewRescuer(RescuerConfig{Store: c.Store, Interval: c.RescueInterval, Lease: c.Lease, Clock: c.Clock,
			Logger: c.Logger, Health: c.Health, OnMoves: c.OnMoves}),
		NewPruner(PrunerConfig{Store: c.Store, Retention: c.Retention, Clock: c.Clock, Logger: c.Logger, Health: c.Health}),
		NewPartitioner(PartitionerConfig{Store: c.Store, Retention: c.Retention, Clock: c.Clock, Logger: c.Logger, Health: c.Health}),
		NewSummarizer(c.Store, c.Health),
		NewCountFolder(c.Store, c.Health),
		NewSettler(c.Store, c.Health, c.OnMoves),
	}
	if !c.NoHorizonWatch {
		out = append(out, NewHorizonWatch(HorizonConfig{Store: c.Store, Clock: c.Clock, Logger: c.Logger, Health: c.Health,
			OnHorizon: c.OnHorizon}))
	}
	return out
}
