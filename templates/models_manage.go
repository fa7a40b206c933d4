package templates

// View models of the workflows page and the schedule form.

// WorkflowsView is the workflows page.
type WorkflowsView struct {
	Page
	Live WorkflowsLive
}

// WorkflowsLive is the refreshed part of the workflows page.
type WorkflowsLive struct {
	Workflows []WorkflowCard
	// Workers counts the live workers.
	Workers int
}

// WorkflowCard is one workflow: the definition of its newest stored
// version (or, for one this process registers but nothing stored, this
// process's), and its versions.
type WorkflowCard struct {
	Name string
	// Version is the version described; "" when none is stored.
	Version string
	// Versions are its stored versions, newest first.
	Versions []WorkflowVersionRow
	// Queue is the queue of the tasks that name none.
	Queue string
	// RunsHref lists the workflow's runs.
	RunsHref string
	DAG      DAG
	Tasks    []WorkflowTaskRow
	// Workers are the live workers that register at least one of its
	// tasks, as "name #id".
	Workers []string
	// Unrouted counts its tasks no live worker registers.
	Unrouted int
}

// WorkflowVersionRow is one stored version of a workflow and how its
// deploy stands.
type WorkflowVersionRow struct {
	Version    string
	Tasks      string // its tasks' names, in definition order
	Compatible string // the earlier versions it also serves, or ""
	Registered Stamp
	Seen       Stamp
	// Its runs in flight by status, and their sum.
	Pending, Running, Paused, Interrupted, InFlight int64
	// Workers are the live workers that serve it, as "name #id".
	Workers []string
	// Newest is the version registered last; Retirable an older one with
	// no run in flight (its workers can go).
	Newest, Retirable bool
}

// WorkflowTaskRow is one task of a workflow definition with its options.
type WorkflowTaskRow struct {
	Name               string
	Anchor             string
	Deps               string
	Queue              string
	Priority           string
	Retries            string
	Timeout            string
	Trigger            string
	RequeueOnInterrupt bool
	Concurrency        string
	RateLimit          string
	// Workers are the live workers that register it, as "name #id".
	Workers []string
}

// ScheduleFormView is the page that creates or edits a schedule.
type ScheduleFormView struct {
	Page
	Form ScheduleForm
}

// ScheduleForm is the schedule form, with the values as sent.
type ScheduleForm struct {
	// Edit is true when it edits the schedule Name (which then cannot
	// change); else it creates one.
	Edit bool
	// Action is where the form posts.
	Action     string
	Name       string
	Expression string
	Timezone   string
	Workflow   string
	Input      string
	CatchUp    string
	MaxCatchUp string
	// Paused creates the schedule paused (create only).
	Paused bool
	// Workflows are the registered workflows offered.
	Workflows []string
	// Error, when set, is shown beside its field (or above the form).
	Error   FieldError
	Preview SchedulePreview
}

// SchedulePreview is the next fires of an expression being typed, or why
// there are none.
type SchedulePreview struct {
	Fires []string
	Error string
	// Empty is true when no expression was given yet.
	Empty bool
}
