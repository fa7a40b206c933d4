package store

import (
	"github.com/uptrace/bun"

	"encoding/json"
	"time"
)

// Task states, stored as lower-case text.
const (
	StatusNotStarted  = "not_started"
	StatusReady       = "ready"
	StatusRunning     = "running"
	StatusDeferred    = "deferred"
	StatusCompleted   = "completed"
	StatusFailed      = "failed"
	StatusSkipped     = "skipped"
	StatusInterrupted = "interrupted"
	StatusCancelled   = "cancelled"
)

// Run states.
const (
	RunPending     = "pending"
	RunRunning     = "running"
	RunPaused      = "paused"
	RunCompleted   = "completed"
	RunFailed      = "failed"
	RunCancelled   = "cancelled"
	RunInterrupted = "interrupted"
)

// IsTerminal reports whether a task in status s will not run again by
// itself (interrupted counts: it waits for an admin).
func IsTerminal(s string) bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusSkipped, StatusCancelled, StatusInterrupted:
		return true
	}
	return false
}

// Run is a row of the view runs: status, counters and times exact.
type Run struct {
	bun.BaseModel `bun:"table:runs"`

	ID             int64           `bun:"id,pk" json:"id"`
	Workflow       string          `bun:"workflow" json:"workflow"`
	Status         string          `bun:"status" json:"status"`
	Paused         bool            `bun:"paused" json:"paused"`
	Input          json.RawMessage `bun:"input,type:jsonb" json:"input"`
	IdempotencyKey *string         `bun:"idempotency_key" json:"idempotency_key,omitempty"`
	// UniqueUntil is the end of the run's uniqueness window (WithUniqueFor):
	// until then its key returns it, whatever its state. Nil without a
	// window, and once an enqueue of the key found the window passed.
	UniqueUntil *time.Time `bun:"unique_until" json:"unique_until,omitempty"`
	// LiveKey is IdempotencyKey while the run is live (pending, running,
	// paused, interrupted) or its window has not been released, else nil;
	// the database derives it.
	LiveKey   *string `bun:"live_key,scanonly" json:"-"`
	Queue     string  `bun:"queue" json:"queue"`
	Priority  int     `bun:"priority" json:"priority"`
	TaskCount int     `bun:"task_count" json:"task_count"`
	// Counters of its tasks by state, kept by every transition; the run's
	// status is derived from them.
	DoneTasks        int        `bun:"done_tasks" json:"done_tasks"` // completed, skipped, failed or cancelled
	FailedTasks      int        `bun:"failed_tasks" json:"failed_tasks"`
	CancelledTasks   int        `bun:"cancelled_tasks" json:"cancelled_tasks"`
	InterruptedTasks int        `bun:"interrupted_tasks" json:"interrupted_tasks"`
	CreatedAt        time.Time  `bun:"created_at" json:"created_at"`
	StartedAt        *time.Time `bun:"started_at" json:"started_at,omitempty"`
	FinishedAt       *time.Time `bun:"finished_at" json:"finished_at,omitempty"`
	UpdatedAt        time.Time  `bun:"updated_at" json:"updated_at"`
	// ParentTaskID is the task that spawned the run (a child run), nil
	// for other runs.
	ParentTaskID *int64 `bun:"parent_task_id" json:"parent_task_id,omitempty"`
	// TraceContext is the W3C trace context of the span that enqueued the
	// run ("traceparent", or "traceparent tracestate"), stored when the
	// enqueuing engine traces (OpenTelemetry); nil otherwise.
	TraceContext *string `bun:"trace_context" json:"-"`
	// HasWaiters: the run has not finished and other runs wait for it
	// (see RunInsertParams.After).
	HasWaiters bool `bun:"has_waiters" json:"-"`
	// TaskIDs are the ids of its tasks in definition order
	// (TaskIDs[idx]), written at enqueue.
	TaskIDs []int64 `bun:"task_ids,array" json:"-"`
	// Version is the workflow version the run was created with (see
	// migration 029); nil for runs from before versions.
	Version *string `bun:"version" json:"version,omitempty"`
	// RerunOf is the run this one reruns (see RunRerun), RerunFrom the
	// task it was rerun from; nil for other runs.
	RerunOf   *int64  `bun:"rerun_of" json:"rerun_of,omitempty"`
	RerunFrom *string `bun:"rerun_from" json:"rerun_from,omitempty"`
	// DebounceKey is the key of WithDebounce or WithSingleton; DebounceAt
	// when a debounced run's root tasks become claimable, DebounceUntil
	// the latest it can move to (first enqueue + maxWait). Nil otherwise.
	DebounceKey   *string    `bun:"debounce_key" json:"debounce_key,omitempty"`
	DebounceAt    *time.Time `bun:"debounce_at" json:"debounce_at,omitempty"`
	DebounceUntil *time.Time `bun:"debounce_until" json:"debounce_until,omitempty"`
}

// Task is a row of tasks.
type Task struct {
	bun.BaseModel `bun:"table:tasks"`

	ID                 int64           `bun:"id,pk" json:"id"`
	RunID              int64           `bun:"run_id" json:"run_id"`
	Idx                int             `bun:"idx" json:"idx"`
	Workflow           string          `bun:"workflow" json:"workflow"`
	Name               string          `bun:"name" json:"name"`
	Queue              string          `bun:"queue" json:"queue"`
	Priority           int             `bun:"priority" json:"priority"`
	Status             string          `bun:"status" json:"status"`
	Attempt            int             `bun:"attempt" json:"attempt"`
	MaxAttempts        int             `bun:"max_attempts" json:"max_attempts"`
	AvailableAt        time.Time       `bun:"available_at" json:"available_at"`
	Deps               []int           `bun:"deps,array" json:"deps"`
	Dependents         []int           `bun:"dependents,array" json:"dependents"`
	PendingDeps        int             `bun:"pending_deps" json:"pending_deps"`
	TriggerRule        json.RawMessage `bun:"trigger_rule,type:jsonb" json:"trigger_rule,omitempty"`
	RequeueOnInterrupt bool            `bun:"requeue_on_interrupt" json:"requeue_on_interrupt"`
	Rescues            int             `bun:"rescues" json:"rescues"`
	MaxRescues         int             `bun:"max_rescues" json:"max_rescues"`
	WorkerID           *int64          `bun:"worker_id" json:"worker_id,omitempty"`
	LeaseExpiresAt     *time.Time      `bun:"lease_expires_at" json:"lease_expires_at,omitempty"`
	Output             json.RawMessage `bun:"output,type:jsonb" json:"output,omitempty"`
	Checkpoint         json.RawMessage `bun:"checkpoint,type:jsonb" json:"checkpoint,omitempty"`
	LastError          *string         `bun:"last_error" json:"last_error,omitempty"`
	CreatedAt          time.Time       `bun:"created_at" json:"created_at"`
	StartedAt          *time.Time      `bun:"started_at" json:"started_at,omitempty"`
	FinishedAt         *time.Time      `bun:"finished_at" json:"finished_at,omitempty"`
	UpdatedAt          time.Time       `bun:"updated_at" json:"updated_at"`
	// ConcKey and RateKey are the flow-control keys the task is limited
	// by (see FlowKey), nil when none.
	ConcKey *string `bun:"conc_key" json:"concurrency_key,omitempty"`
	RateKey *string `bun:"rate_key" json:"rate_key,omitempty"`
	FairKey *string `bun:"fair_key,scanonly" json:"-"`
	// ResumeWantedAt is when a parked task with a concurrency key last
	// found its key full as it tried to come back (see TaskResumeKeyed).
	ResumeWantedAt *time.Time `bun:"resume_wanted_at" json:"-"`
	// Version is its run's version, for the claim's routing (see Run).
	Version *string `bun:"version" json:"-"`
	// WaitKind, WaitName, WaitUntil and WaitSince are the durable wait
	// (sleep or signal) a deferred task is parked in; WaitKind is nil
	// when it is in none.
	WaitKind  *string    `bun:"wait_kind" json:"wait_kind,omitempty"`
	WaitName  *string    `bun:"wait_name" json:"wait_name,omitempty"`
	WaitUntil *time.Time `bun:"wait_until" json:"wait_until,omitempty"`
	WaitSince *time.Time `bun:"wait_since" json:"wait_since,omitempty"`
	// WaitEveryMs is the check interval, in milliseconds, of the
	// DeferUntil condition a deferred task is parked in (WaitKind is nil
	// then, and WaitSince says when it parked); nil when it is in none.
	WaitEveryMs *int64 `bun:"wait_every_ms" json:"wait_every_ms,omitempty"`
	// RunFast: the task's run is a fast run, whose row its transitions
	// do not write (see migration 019 and the view runs).
	RunFast bool `bun:"run_fast,scanonly" json:"-"`
	// FirstStartedAt is the start of the task's first attempt (StartedAt
	// is its latest's); nil for a task claimed before migration 019.
	FirstStartedAt *time.Time `bun:"first_started_at,scanonly" json:"-"`
	// CarriedN counts the dependencies whose finishes counted the task
	// down and carried their outputs into its row, CarriedOutputs, for
	// its claim to read: [idx, output] of those whose output is not null
	// (see migration 021). Both are nil once it finished.
	CarriedN       *int            `bun:"carried_n,scanonly" json:"-"`
	CarriedOutputs json.RawMessage `bun:"carried_outputs,scanonly" json:"-"`
}

// Event is a row of task_events: one committed transition.
type Event struct {
	bun.BaseModel `bun:"table:task_events"`

	ID       int64           `bun:"id,pk" json:"id"`
	RunID    int64           `bun:"run_id" json:"run_id"`
	TaskID   int64           `bun:"task_id" json:"task_id"`
	From     *string         `bun:"from_status" json:"from,omitempty"`
	To       string          `bun:"to_status" json:"to"`
	WorkerID *int64          `bun:"worker_id" json:"worker_id,omitempty"`
	Attempt  int             `bun:"attempt" json:"attempt"`
	At       time.Time       `bun:"at" json:"at"`
	Error    *string         `bun:"error" json:"error,omitempty"`
	Detail   json.RawMessage `bun:"detail,type:jsonb" json:"detail,omitempty"`
}

// Worker is a row of workers.
type Worker struct {
	bun.BaseModel `bun:"table:workers"`

	ID          int64          `bun:"id,pk" json:"id"`
	Name        string         `bun:"name" json:"name"`
	Queues      map[string]int `bun:"queues,type:jsonb" json:"queues"`
	Slots       int            `bun:"slots" json:"slots"`
	Status      string         `bun:"status" json:"status"`
	StartedAt   time.Time      `bun:"started_at" json:"started_at"`
	HeartbeatAt time.Time      `bun:"heartbeat_at" json:"heartbeat_at"`
	StoppedAt   *time.Time     `bun:"stopped_at" json:"stopped_at,omitempty"`
	// Handles are the "workflow.task" names the worker runs and claims;
	// nil (NULL) for a worker that declared no routing, which claims any
	// task of its queues.
	Handles []string `bun:"handles,array" json:"handles"`
	// Versions are the "workflow@version" names the worker serves; nil
	// for one that declared none, which serves any version.
	Versions []string `bun:"versions,array" json:"versions,omitempty"`
}

// Queue is a row of queues.
type Queue struct {
	bun.BaseModel `bun:"table:queues"`

	Name       string    `bun:"name,pk" json:"name"`
	Paused     bool      `bun:"paused" json:"paused"`
	MaxRunning *int      `bun:"max_running" json:"max_running,omitempty"`
	CreatedAt  time.Time `bun:"created_at" json:"created_at"`
	UpdatedAt  time.Time `bun:"updated_at" json:"updated_at"`
}

// Schedule is a row of schedules.
type Schedule struct {
	bun.BaseModel `bun:"table:schedules"`

	ID         int64           `bun:"id,pk" json:"id"`
	Name       string          `bun:"name" json:"name"`
	Expression string          `bun:"expression" json:"expression"`
	Timezone   string          `bun:"timezone" json:"timezone"`
	Workflow   string          `bun:"workflow" json:"workflow"`
	Input      json.RawMessage `bun:"input,type:jsonb" json:"input"`
	Paused     bool            `bun:"paused" json:"paused"`
	CatchUp    string          `bun:"catch_up" json:"catch_up"`
	MaxCatchUp int             `bun:"max_catch_up" json:"max_catch_up"`
	NextFireAt time.Time       `bun:"next_fire_at" json:"next_fire_at"`
	LastFireAt *time.Time      `bun:"last_fire_at" json:"last_fire_at,omitempty"`
	LastRunID  *int64          `bun:"last_run_id" json:"last_run_id,omitempty"`
	CreatedAt  time.Time       `bun:"created_at" json:"created_at"`
	UpdatedAt  time.Time       `bun:"updated_at" json:"updated_at"`
	// ConfigDefinition is the definition an engine's Config.Schedules last
	// applied (nil: none did); a start applies its config only when it
	// differs, so site edits survive restarts (see ScheduleApplyConfig).
	ConfigDefinition json.RawMessage `bun:"config_definition,type:jsonb" json:"-"`
}
