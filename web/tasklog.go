package web

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/templates"
)

// taskLogShown is how many of a task's latest live log lines its page
// and the JSON API show.
const taskLogShown = 500

// taskLog reads a task's live log as the task page shows it.
func (s *Server) taskLog(ctx context.Context, taskID int64) (templates.TaskLog, error) {
	lines, cut, err := s.reads(ctx).TaskLogRecent(ctx, taskID, taskLogShown)
	if err != nil {
		return templates.TaskLog{}, err
	}
	v := templates.TaskLog{TaskID: taskID, Cut: cut, Limit: taskLogShown}
	for _, l := range lines {
		v.Lines = append(v.Lines, templates.TaskLogLine{
			ID: l.ID, Attempt: l.Attempt, At: l.At.UTC().Format("15:04:05.000"), Level: l.Level, Msg: l.Msg, Attrs: logAttrs(l.Attrs),
		})
	}
	return v, nil
}

// logAttrs renders attributes as "k=v k=v", by key.
func logAttrs(attrs map[string]string) string {
	keys := slices.Sorted(maps.Keys(attrs))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + attrs[k]
	}
	return strings.Join(parts, " ")
}

// taskLogFragment serves the live log part of a task page; 404 for an
// unknown task.
func (s *Server) taskLogFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.TaskLog, error) {
		id, err := s.knownTask(r)
		if err != nil {
			return templates.TaskLog{}, err
		}
		return s.taskLog(r.Context(), id)
	}, templates.TaskLogPart)
}

// apiTaskLog serves a task's latest live log lines, oldest first.
func (s *Server) apiTaskLog(w http.ResponseWriter, r *http.Request) {
	id, err := s.knownTask(r)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	lines, cut, err := s.reads(r.Context()).TaskLogRecent(r.Context(), id, taskLogShown)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lines": nonNil(lines), "cut": cut})
}

// knownTask reads the task id of the path and checks the task exists.
func (s *Server) knownTask(r *http.Request) (int64, error) {
	id, err := pathID(r, "task")
	if err != nil {
		return 0, err
	}
	err = s.readFresh(r.Context(), func(st Reads) error {
		_, err := st.TaskGet(r.Context(), id)
		return notFoundAs(err, "task %d not found", id)
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}
