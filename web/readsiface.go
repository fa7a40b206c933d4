package web

import (
	"context"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Reads is every query the site reads with: exactly the read methods of
// *store.Store that its pages, fragments, API and metrics call, so an
// embedder passes store.New(db, schema) (and a second one over a read
// replica's pool for Config.ReplicaReads). The site never writes through
// it: every change goes through Engine.
type Reads interface {
	// DatabasePing checks that the database answers (GET /healthz).
	DatabasePing(ctx context.Context) error
	// ReplicaStatusGet reports a replica's replication state (GET /healthz).
	ReplicaStatusGet(ctx context.Context) (store.ReplicaStatus, error)
	// Horizon names what holds back vacuum (Needs attention).
	Horizon(ctx context.Context) (store.Horizon, error)
	// Snapshot runs fn with reads that all see one repeatable-read
	// snapshot (a run's page and its tasks agree).
	Snapshot(ctx context.Context, fn func(*store.Store) error) error

	// Runs.
	RunGet(ctx context.Context, id int64) (*store.Run, error)
	RunListFiltered(ctx context.Context, p *store.RunListParams) ([]store.RunListItem, error)
	RunCountFiltered(ctx context.Context, p *store.RunListParams, upTo int) (int, error)
	RunIDListFiltered(ctx context.Context, p *store.RunListParams) ([]int64, error)
	RunDepList(ctx context.Context, runID int64) ([]store.RunDep, error)
	RunParentGet(ctx context.Context, runID int64) (*store.RunParent, error)
	RunChildList(ctx context.Context, runID int64, limit int) ([]store.ChildRun, error)
	RunChildProgressList(ctx context.Context, runID int64) (map[int64]store.ChildProgress, error)
	RunTransitionList(ctx context.Context, runID int64) (map[int64][]store.Transition, error)
	EventListByRunRecent(ctx context.Context, runID int64, limit int) ([]store.Event, error)

	// Tasks.
	TaskGet(ctx context.Context, id int64) (*store.Task, error)
	TaskListByRun(ctx context.Context, runID int64) ([]store.Task, error)
	TaskRefListByRunsStatuses(ctx context.Context, runIDs []int64, statuses []string) ([]store.TaskRef, error)
	TaskDepList(ctx context.Context, taskID int64) ([]store.Task, error)
	TaskAttemptList(ctx context.Context, taskID int64) ([]store.TaskAttempt, error)
	TaskWaitGet(ctx context.Context, id int64) (*store.TaskWait, error)
	TaskChildProgress(ctx context.Context, taskID int64) (store.ChildProgress, error)
	TaskSignalList(ctx context.Context, p *store.TaskSignalListParams) ([]store.SignalInfo, error)
	TaskStepRecent(ctx context.Context, taskID int64, limit int) ([]store.StepInfo, error)
	TaskLogRecent(ctx context.Context, taskID int64, limit int) ([]store.TaskLogLine, bool, error)
	EventListByTask(ctx context.Context, taskID int64) ([]store.Event, error)

	// Overview, workers, queues and schedules.
	TaskCountsByState(ctx context.Context) ([]store.TaskCount, error)
	TaskBreakdown(ctx context.Context, p store.BreakdownParams) ([]store.BreakdownRow, error)
	ThroughputPerMinute(ctx context.Context, since, until time.Time) ([]store.ThroughputBucket, error)
	WorkerSlotList(ctx context.Context, limit int) ([]store.WorkerSlots, error)
	WorkerHandlesList(ctx context.Context) ([]store.WorkerHandles, error)
	QueueDepthList(ctx context.Context) ([]store.QueueDepth, error)
	FlowHoldList(ctx context.Context, perQueue int) (map[string][]store.FlowHold, map[string]int64, error)
	UnroutableList(ctx context.Context) ([]store.Unroutable, error)
	ScheduleGet(ctx context.Context, name string) (*store.Schedule, error)
	ScheduleList(ctx context.Context) ([]store.Schedule, error)
}

// The store answers every read of the site.
var _ Reads = (*store.Store)(nil)
