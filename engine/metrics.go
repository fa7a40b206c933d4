package engine

import (
	"errors"

	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/store"
)

// Process-wide Prometheus metrics (internal/telemetry), by their root names.
var (
	claimLatency    = telemetry.ClaimLatency
	taskDuration    = telemetry.TaskDuration
	slotsInUse      = telemetry.SlotsInUse
	slotsTotal      = telemetry.SlotsTotal
	countMoves      = telemetry.CountMoves
	countTransition = telemetry.CountTransition
	observeHorizon  = telemetry.ObserveHorizon
)

// attemptOutcome names the outcome of an attempt that ends by writing
// item, its handler context's cause being cause (telemetry.AttemptOutcome).
func attemptOutcome(item store.TransitionItem, cause error) string {
	return telemetry.AttemptOutcome(item, errors.Is(cause, errLeaseLost), errors.Is(cause, errShutdownCancel))
}
