package engine

import (
	"github.com/cairnhq/cairn/engine/internal/notify"
	"github.com/cairnhq/cairn/engine/internal/tasklog"
	"github.com/cairnhq/cairn/store"
)

// Live task logs: every line a handler logs through TaskHandle.Logger
// (within maxLogLines per attempt) is also handed to the task log writer
// (see package tasklog), which appends them to task_logs in batches and
// announces their tasks on the events channel, so that an open task page
// shows them as they come.

// LogNote says that a task has new lines in its live log.
type LogNote = notify.LogNote

// liveLine is a captured line as the live log stores it (see
// tasklog.Line); a line without a time is stamped now.
func liveLine(ex *execution, l logLine) store.TaskLogLine {
	at := l.At
	if at.IsZero() {
		at = ex.e.cfg.Clock()
	}
	return tasklog.Line(store.TaskLogLine{TaskID: ex.Task.ID, RunID: ex.Task.RunID, Attempt: ex.Task.Attempt,
		At: at, Level: l.Level, Msg: l.Msg}, l.Attrs)
}

// SubscribeLogs returns a channel of notes naming the tasks that have new
// lines in their live log (task_logs), from every engine on the database
// (it needs Config.DatabaseURL), and a function that ends the
// subscription. A consumer more than buffer notes behind misses notes.
func (e *Engine) SubscribeLogs(buffer int) (<-chan LogNote, func()) {
	return e.hub.SubscribeLogs(buffer)
}
