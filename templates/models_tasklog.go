package templates

// TaskLog is the live log of a task: the latest lines its handler logged
// through its task handle, appended live while it runs.
type TaskLog struct {
	TaskID int64
	Lines  []TaskLogLine
	// Cut is set when older lines were left out.
	Cut bool
	// Limit is how many lines are shown at most.
	Limit int
}

// TaskLogLine is one line of a task's live log.
type TaskLogLine struct {
	ID      int64
	Attempt int
	At      string
	Level   string
	Msg     string
	Attrs   string
}
