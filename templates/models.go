// Package templates holds the admin site's templ components. Each page
// component takes one view-model struct, built by package web, and does no
// I/O: everything it shows is already formatted in the view model.
package templates

// Page is what every full page carries: the layout's data.
type Page struct {
	// Title is the page title, without the site name.
	Title string
	// Nav names the active navigation entry: "overview", "runs",
	// "workflows", "workers", "queues" or "schedules".
	Nav string
	// CSRF is the token state-changing forms send back.
	CSRF string
	// Role is "admin" or "readonly".
	Role string
	// CanWrite is true for the admin role: action forms are shown.
	CanWrite bool
	// AuthEnabled shows the logout button (a password is configured).
	AuthEnabled bool
	// Flash is the message of the previous action, if any.
	Flash *Flash
	// CSSURL and JSURL are the embedded assets, with a version query.
	CSSURL string
	JSURL  string
}

// Flash is a one-time message after an action.
type Flash struct {
	Error   bool
	Message string
}

// StateCount is how many tasks are in one state.
type StateCount struct {
	State string
	Count int64
}

// BarChart is an inline SVG bar chart with stacked completed/failed bars,
// its geometry computed in advance.
type BarChart struct {
	Width, Height int
	Bars          []Bar
	// Max is the value of the tallest bar; From and To label the axis.
	Max       int64
	From, To  string
	Completed int64
	Failed    int64
}

// Bar is one minute of the chart: a completed and a failed rectangle.
type Bar struct {
	X, W         int
	DoneY, DoneH int
	FailY, FailH int
	Title        string
}

// WorkerRow is one worker with its slot use.
type WorkerRow struct {
	ID        int64
	Name      string
	Status    string
	Live      bool
	Slots     int
	Running   int
	Deferred  int
	Queues    string
	Heartbeat string // age, e.g. "2 s ago"
	Started   string
	Stopped   string
}

// QueueRow is one queue with its depth and controls.
type QueueRow struct {
	Name        string
	Paused      bool
	Cap         string // "" when uncapped
	Ready       int64
	Available   int64
	Running     int64
	Deferred    int64
	Slots       int64
	Workers     int64
	OldestReady string
	// Unroutable are the ready tasks of the queue that no live worker of
	// the queue registers (routing): they wait for one.
	Unroutable []UnroutableRow
	// Holds are the flow keys that hold the queue's ready tasks back (at
	// their concurrency limit, or with a full rate window), most ready
	// first; HoldsMore counts those left out.
	Holds     []FlowHoldRow
	HoldsMore int64
}

// FlowHoldRow is a flow key holding ready tasks back.
type FlowHoldRow struct {
	// Kind is "concurrency" or "rate".
	Kind string
	// Key is "group · value".
	Key string
	// Detail says it, e.g. "stripe · cust_42: 2/2 running, 130 ready".
	Detail string
}

// UnroutableRow is a task, "workflow.task", whose ready tasks no live
// worker can run.
type UnroutableRow struct {
	Task  string
	Ready int64
}

// Overview is the live part of the overview page.
type Overview struct {
	States  []StateCount
	Total   int64
	Chart   BarChart
	Workers []WorkerRow
	Queues  []QueueRow
	// MoreWorkers is set when the worker list was cut.
	MoreWorkers bool
	// Attention lists what needs a look, most urgent first.
	Attention []Attention
	// Workflows and QueueBreakdown are the last hour per workflow and per
	// queue, those that need attention first.
	Workflows      []Breakdown
	QueueBreakdown []Breakdown
}

// OverviewView is the overview page.
type OverviewView struct {
	Page
	Overview Overview
}

// WorkersView is the workers page and its live fragment.
type WorkersView struct {
	Page
	Workers []WorkerRow
	Limit   int
}

// QueuesView is the queues page and its live fragment.
type QueuesView struct {
	Page
	Queues []QueueRow
	// Attention and Breakdown are the queues' attention list and last
	// hour, as on the overview.
	Attention []Attention
	Breakdown []Breakdown
}

// RunFilter is the runs list filter, as typed in the form.
type RunFilter struct {
	Workflow string
	Status   string
	From     string
	To       string
	Q        string
}

// RunRow is one run of the runs list.
type RunRow struct {
	ID       int64
	Workflow string
	Status   string
	Created  Stamp
	Key      string
	Input    string // shortened
	Total    int
	Done     int
	Failed   int
	Active   int
	Parked   int
	// Duration is how long it has run (to now while it runs); "" before
	// it started.
	Duration string
}

// RunsList is the live part of the runs page.
type RunsList struct {
	Runs    []RunRow
	NextURL string
	PrevURL string
	// FirstURL leads back to the newest runs when paging.
	FirstURL string
	// Selectable shows a checkbox on each row (admin only), part of the
	// form runs-select.
	Selectable bool
}

// FieldError is a refused input and the field it concerns ("" or a
// field not on the form: shown above the form).
type FieldError struct {
	Field   string
	Message string
}

// RunsView is the runs page.
type RunsView struct {
	Page
	Filter RunFilter
	// FilterError, when set, is shown beside its field instead of the list.
	FilterError FieldError
	Workflows   []string
	Statuses    []string
	// Query is the filter as a query string, for the live refresh.
	Query string
	List  RunsList
	// Start is the "Start a run" form (admin only).
	Start StartForm
	// Matching counts the runs matching the filter, up to BulkLimit;
	// MatchingMore is set when more match (a bulk action takes the newest
	// BulkLimit).
	Matching     int
	MatchingMore bool
	BulkLimit    int
}

// StartForm is the runs page's "Start a run" form: the workflows it
// offers and, when a submit was refused, the values as sent and the error
// beside its field (the form then shows open).
type StartForm struct {
	Workflows []string
	Workflow  string
	Input     string
	Key       string
	// DebounceKey, DebounceWait and DebounceMaxWait debounce the run: the
	// key and the waits as typed ("5s", "1m").
	DebounceKey     string
	DebounceWait    string
	DebounceMaxWait string
	// Singleton is the singleton key.
	Singleton string
	Error     FieldError
}

// RunInfo is a run's header.
type RunInfo struct {
	ID        int64
	Workflow  string
	Status    string
	Paused    bool
	Queue     string
	Priority  int
	Key       string
	Created   Stamp
	Started   Stamp
	Finished  Stamp
	TaskCount int
	CanCancel bool
	CanPause  bool
	CanResume bool

	// Duration is how long it has run (to now while it runs); "" before
	// it started.
	Duration string
	// CanRetry: the run has failed or cancelled tasks (Retry run).
	CanRetry bool
	// RerunOf is the run this one reruns and RerunFrom the task it was
	// rerun from (0 and "" for other runs).
	RerunOf   int64
	RerunFrom string
	// DebounceKey is the key of a debounced or singleton run that has not
	// started ("" otherwise); DebounceAt and DebounceUntil, for a
	// debounce, its start and the latest its start can move to.
	DebounceKey   string
	DebounceAt    Stamp
	DebounceUntil Stamp
}

// DAG is a run's graph, laid out: nodes in columns by dependency depth.
type DAG struct {
	Width, Height int
	Nodes         []DAGNode
	Edges         []DAGEdge
}

// DAGNode is one task box.
type DAGNode struct {
	TaskID int64
	Name   string
	Status string
	// Detail, when set, replaces the state on the box's second line (a
	// workflow definition's nodes have no state).
	Detail string
	X, Y   int
	W, H   int
	Href   string
	// Children, when set, counts the child runs the task spawned: the
	// box shows them as one collapsed group.
	Children *DAGChildren
	// Duration says its time beside its state: "waiting 3 s" while ready,
	// the attempt's time while it runs, its run time once it ran.
	Duration string
}

// DAGChildren counts a task's child runs and the finished ones.
type DAGChildren struct {
	Done, Total int64
}

// DAGEdge is one dependency arrow, as an SVG path.
type DAGEdge struct {
	From, To int64
	Path     string
}

// TaskRow is one task of a run.
type TaskRow struct {
	ID          int64
	Name        string
	Status      string
	Queue       string
	Attempt     int
	MaxAttempts int
	Output      string
	LastError   string
	Updated     Stamp
	// Wait and RunTime are its time ready and its attempts' time, "" when
	// it never was ready.
	Wait    string
	RunTime string
}

// EventRow is one transition of a timeline.
type EventRow struct {
	ID       int64
	TaskID   int64
	TaskName string
	From     string
	To       string
	At       Stamp
	Attempt  int
	Worker   string
	Error    string
}

// RunLive is the live part of a run page.
type RunLive struct {
	CSRF     string
	CanWrite bool
	Run      RunInfo
	DAG      DAG
	Tasks    []TaskRow
	Events   []EventRow
	// EventsCut is set when only the latest events are shown.
	EventsCut bool
	// Parent is the task that spawned the run (a child run); nil for
	// other runs.
	Parent *RunParent
	// Children are the runs spawned by the run's tasks, oldest first;
	// ChildrenCut is set when only the first ones are shown.
	Children    []ChildRunRow
	ChildrenCut bool
	// After are the runs this run's root tasks wait (or waited) for.
	After []RunAfter
	// Waterfall is the run's timeline, one row per task.
	Waterfall Waterfall
}

// RunParent links a child run to the task that spawned it.
type RunParent struct {
	RunID    int64
	TaskID   int64
	TaskName string
}

// ChildRunRow is one child run on its parent run's page.
type ChildRunRow struct {
	ID       int64
	Workflow string
	Status   string
	// Task is the name of the parent task that spawned it.
	Task string
}

// RunAfter is a run another run waits for (engine.WithAfter).
type RunAfter struct {
	ID     int64
	Status string // its final status once finished, else its current one; empty once pruned
	// Finished: it finished and counted the waiting run down.
	Finished bool
}

// RunView is the run detail page.
type RunView struct {
	Page
	Input string
	Live  RunLive
}

// TaskInfo is a task's header.
type TaskInfo struct {
	ID                 int64
	RunID              int64
	Workflow           string
	Name               string
	Status             string
	Queue              string
	Priority           int
	Attempt            int
	MaxAttempts        int
	Rescues            int
	MaxRescues         int
	Worker             string
	LeaseExpires       string
	AvailableAt        string
	Created            Stamp
	Started            Stamp
	Finished           Stamp
	LastError          string
	RequeueOnInterrupt bool
	TriggerRule        string
	// ConcKey and RateKey are its flow-control keys as "group · value",
	// "" when it has none.
	ConcKey string
	RateKey string
	// Waiting says why a ready task is not running yet ("" otherwise);
	// WaitReason is its code (see store.WaitReason).
	Waiting    string
	WaitReason string
	CanRetry   bool
	CanRequeue bool
	CanCancel  bool

	// QueueWait and RunTime are its time ready and its attempts' time.
	QueueWait string
	RunTime   string
}

// DepRow is a dependency of a task.
type DepRow struct {
	ID     int64
	Name   string
	Status string
}

// LogLine is one line a handler logged during an attempt.
type LogLine struct {
	At    string
	Level string
	Msg   string
	Attrs string
}

// AttemptRow is one attempt of a task.
type AttemptRow struct {
	Attempt int
	// Outcome is the state the attempt ended in; Label says it in words.
	Outcome    string
	Label      string
	Started    Stamp
	Ended      Stamp
	Duration   string
	Worker     string
	Error      string
	Stack      string
	Reason     string
	Log        []LogLine
	InProgress bool
	// PastError is set when Error belongs to an attempt that another
	// attempt followed (or the task completed since): not its current error.
	PastError bool

	// Wait is the time it waited ready before its claim, "" if unknown;
	// Duration is its time from claim to end (to now while in progress).
	Wait string
}

// TaskLive is the live part of a task page.
type TaskLive struct {
	CSRF       string
	CanWrite   bool
	Task       TaskInfo
	Deps       []DepRow
	Attempts   []AttemptRow
	Checkpoint string
	Output     string
	// Context is the merged context: run input and dependency outputs.
	Context string
	Events  []EventRow
	// Wait is the durable wait the task is parked in; nil when none.
	Wait *DurableWait
	// Condition is the DeferUntil condition the task is parked in; nil
	// when none.
	Condition *ConditionWait
	// Steps are its most recent journaled steps; StepsMore counts those
	// not shown.
	Steps     []StepRow
	StepsMore int64
	// Pending are its signals no wait took yet, oldest first; Consumed the
	// taken ones, most recent first; the More fields count those not shown.
	Pending      []SignalRow
	PendingMore  int64
	Consumed     []SignalRow
	ConsumedMore int64
}

// TaskView is the task detail page.
type TaskView struct {
	Page
	Input string
	Live  TaskLive
	// Signal is the Send signal form, shown to admins.
	Signal SignalForm
	// Rerun is the Rerun from here form, shown to admins on the tasks of
	// a finished run; nil otherwise.
	Rerun *RerunForm
	// Log is the task's live log.
	Log TaskLog
}

// ScheduleRow is one schedule.
type ScheduleRow struct {
	Name       string
	Expression string
	Timezone   string
	Workflow   string
	Input      string
	Paused     bool
	CatchUp    string
	NextFire   string
	LastFire   string
	LastRunID  int64
	NextFires  []string
	// Error explains why the next fires could not be computed.
	Error string
}

// SchedulesView is the schedules page.
type SchedulesView struct {
	Page
	Schedules []ScheduleRow
}

// ConfirmView asks to confirm a bulk action on the runs filter.
type ConfirmView struct {
	Page
	// Action is "cancel", "retry", "requeue" or "delete".
	Action string
	Filter RunFilter
	// Note explains matching runs the action leaves alone (retry:
	// interrupted runs, which are requeued instead), if any.
	Note string
	// Runs and Tasks count what the action touches; Limit caps Runs.
	Runs   int
	Tasks  int
	Limit  int
	Capped bool
	Back   string
	// All is set when no filter is: the action is for every run, and
	// the form asks for that explicitly (all=1).
	All bool
}

// LoginView is the login page.
type LoginView struct {
	Page
	Error string
	Next  string
}

// ErrorView is an error page.
type ErrorView struct {
	Page
	Status  int
	Message string
	Back    string
}
