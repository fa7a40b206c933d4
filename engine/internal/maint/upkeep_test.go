package maint_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/maint"
)

// Upkeep is the rescuer, pruner, partitioner, summarizer, count folder
// and settler, and the horizon watch unless told not to; each starts and
// stops (twice) in the one lifecycle shape.
func TestUpkeepListsTheServicesEveryEngineRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := maint.UpkeepConfig{Store: b.st, Lease: time.Minute, RescueInterval: time.Hour, Retention: time.Hour,
		Clock: func() time.Time { return fakeNow }, Logger: slog.New(slog.DiscardHandler), Health: b.health}
	require.Len(t, maint.Upkeep(cfg), 7)
	cfg.NoHorizonWatch = true
	list := maint.Upkeep(cfg)
	require.Len(t, list, 6)
	for _, s := range list {
		require.NoError(t, s.Start(context.Background()))
	}
	for _, s := range list {
		s.Stop()
		s.Stop()
	}
}
