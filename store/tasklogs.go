package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// This file holds the live task logs (task_logs, see 014_task_logs): the
// lines a handler logs through its task handle, appended in batches while
// it runs and announced on the events channel (EventsMessage.Logs).

// TaskLogLine is a row of task_logs: one line a handler logged.
type TaskLogLine struct {
	ID      int64             `bun:"id" json:"id"`
	TaskID  int64             `bun:"task_id" json:"task_id"`
	Attempt int               `bun:"attempt" json:"attempt"`
	At      time.Time         `bun:"at" json:"at"`
	Level   string            `bun:"level" json:"level"`
	Msg     string            `bun:"msg" json:"msg"`
	Attrs   map[string]string `bun:"attrs,type:jsonb" json:"attrs,omitempty"`
	// RunID is the run of the task, for the notification; not stored.
	RunID int64 `bun:"-" json:"-"`
}

// taskLogRow is a line as TaskLogAppend sends it to the database.
type taskLogRow struct {
	TaskID  int64             `json:"task_id"`
	Attempt int               `json:"attempt"`
	At      time.Time         `json:"at"`
	Level   string            `json:"level"`
	Msg     string            `json:"msg"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// TaskLogAppend stores lines, in order, and announces the tasks they
// belong to on the events channel, in one statement. A line of an attempt
// its task has moved on from is not stored. The caller bounds
// their number and size (the engine keeps at most 200 lines per attempt,
// each cut at 2 KiB).
func (s *Store) TaskLogAppend(ctx context.Context, lines []TaskLogLine) error {
	if len(lines) == 0 {
		return nil
	}
	rows := make([]taskLogRow, len(lines))
	var notes []LogNote
	seen := map[int64]bool{}
	for i, l := range lines {
		rows[i] = taskLogRow{TaskID: l.TaskID, Attempt: l.Attempt, At: l.At.UTC(), Level: l.Level, Msg: l.Msg, Attrs: l.Attrs}
		if !seen[l.TaskID] {
			seen[l.TaskID] = true
			notes = append(notes, LogNote{TaskID: l.TaskID, RunID: l.RunID})
		}
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("append task logs: %w", err)
	}
	var payloads []string
	for start := 0; start < len(notes); start += LogNotesPerPayload {
		p, err := EventsMessage{Logs: notes[start:min(start+LogNotesPerPayload, len(notes))]}.Encode()
		if err != nil {
			return fmt.Errorf("append task logs: %w", err)
		}
		payloads = append(payloads, p)
	}
	_, err = s.exec(ctx, `
WITH ins AS (
	INSERT INTO ?schema.task_logs (task_id, attempt, at, level, msg, attrs)
	SELECT x.task_id, x.attempt, x.at, x.level, x.msg, x.attrs
	FROM ROWS FROM (jsonb_to_recordset(?::jsonb) AS (task_id bigint, attempt int, at timestamptz, level text, msg text, attrs jsonb))
		WITH ORDINALITY AS x(task_id, attempt, at, level, msg, attrs, i)
	-- Fenced: a line of an attempt the task has moved on from (rescued and
	-- claimed again) is not stored.
	WHERE EXISTS (SELECT 1 FROM ?schema.tasks t WHERE t.id = x.task_id AND t.attempt = x.attempt)
	ORDER BY x.i
)
SELECT pg_notify(?, p) FROM unnest(?::text[]) p WHERE EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())`, jsonArg(doc), s.EventsChannel(), array(payloads))
	if err != nil {
		return fmt.Errorf("append %d task log lines: %w", len(lines), err)
	}
	return nil
}

// TaskLogRecent returns the latest limit lines of a task, oldest first,
// and whether older ones were left out.
func (s *Store) TaskLogRecent(ctx context.Context, taskID int64, limit int) ([]TaskLogLine, bool, error) {
	var out []TaskLogLine
	err := s.raw(`SELECT * FROM (SELECT id, task_id, attempt, at, level, msg, attrs FROM ?schema.task_logs
		WHERE task_id = ? ORDER BY id DESC LIMIT ?) l ORDER BY id`, taskID, limit+1).Scan(ctx, &out)
	if err != nil {
		return nil, false, fmt.Errorf("list log of task %d: %w", taskID, err)
	}
	if len(out) > limit {
		return out[1:], true, nil
	}
	return out, false, nil
}
