package engine

import "context"

// Schedule is a cron schedule that enqueues runs of a workflow.
type Schedule struct {
	// Name is unique among schedules.
	Name string
	// Expression is a robfig/cron expression: 5 fields or a descriptor
	// such as @hourly or @every 90s.
	Expression string
	// Timezone is the IANA zone the expression is read in. Defaults to UTC.
	Timezone string
	// Workflow is the workflow to enqueue.
	Workflow string
	// Input is the JSON object input of each run.
	Input any
	// CatchUp says what to do with fires missed while no engine ran:
	// "skip" (default), "one" or "all" (bounded by MaxCatchUp).
	CatchUp string
	// MaxCatchUp bounds CatchUp "all". Defaults to 100.
	MaxCatchUp int
	// Paused schedules do not fire.
	Paused bool
}

// scheduler fires due schedules while this engine holds the leader lease.
type scheduler struct{ e *Engine }

func newScheduler(e *Engine) *scheduler { return &scheduler{e: e} }

func (s *scheduler) runOnce(ctx context.Context) error { return nil }

func (e *Engine) upsertSchedules(ctx context.Context) error { return nil }
