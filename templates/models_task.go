package templates

// StepRow is one journaled step of a task.
type StepRow struct {
	Name string
	// Words says an engine-internal entry (a name starting "cairn:") in
	// plain words, e.g. "slept until 2025-01-02 15:04:05 UTC"; "" for the
	// handler's own steps.
	Words   string
	Attempt int
	At      string
	Size    string
}

// SignalRow is one signal sent to a task.
type SignalRow struct {
	ID   int64
	Name string
	Sent string
	Size string
	// Consumed and Attempt say when and by which attempt a wait took it
	// ("" and 0 while pending).
	Consumed string
	Attempt  int
}

// DurableWait is the durable wait a deferred task is parked in, in words.
type DurableWait struct {
	// Kind is sleep, signal or runs.
	Kind string
	// Text says it, e.g. "waiting for signal approved (timeout at ...)".
	Text string
	// Since is when the wait began.
	Since string
}

// ConditionWait is the DeferUntil condition a deferred task is parked in
// (no durable wait).
type ConditionWait struct {
	// Every is the interval of its checks, e.g. "5 s".
	Every string
	// Since is when it parked.
	Since Stamp
	// LastCheck is when the condition was last checked; the zero Stamp
	// when this process does not hold the task (checks are kept in the
	// holder's memory only). HeldBy then names the holder, e.g. "#3".
	LastCheck Stamp
	HeldBy    string
}

// SignalForm is the Send signal form of a task page, with what was sent
// and the outcome of the last post.
type SignalForm struct {
	Action  string
	Name    string
	Payload string
	// Error, when set, is shown beside its field (or above the form).
	Error FieldError
}

// RerunForm is the Rerun from here form of a finished run's task page:
// a new run from this task, its upstream tasks' outputs kept, with an
// optional edited input.
type RerunForm struct {
	Action string
	// Input is the run's input, offered for editing.
	Input string
}
