package engine

import "time"

// Concurrency limits how many tasks of a group and key value run at once,
// cluster-wide and atomically, also across many engines. Tasks over the
// limit stay ready and spend no attempt; a running task that defers
// (DeferUntil) gives its place back until it resumes.
type Concurrency struct {
	// Group names the limit: tasks of any workflow with the same group
	// and key value share it. Defaults to "workflow.task".
	Group string
	// Key is a dotted path into the run input ("customer", "account.id")
	// whose value keys the limit; "" is one limit for the whole group.
	Key string
	// Max is how many may run at once (at least 1).
	Max int
}

// RateLimit limits how many tasks of a group and key value start in any
// window of length Per, cluster-wide, by the database clock. A task held
// back stays ready with its available_at moved to when it may start, and
// spends no attempt.
type RateLimit struct {
	// Group names the limit; required when Key is set. Defaults to
	// "workflow.task" when both are empty.
	Group string
	// Key is a dotted path into the run input; "" is one limit for the group.
	Key string
	// Limit is how many starts a window may hold (at least 1).
	Limit int
	// Per is the window's length (at least a millisecond).
	Per time.Duration
}
