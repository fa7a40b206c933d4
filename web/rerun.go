package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// This file holds "Rerun from here" (engine.RerunFrom): the task page's
// form and POST /api/runs/{id}/rerun.

// rerunForm reruns the task's finished run from the task, with the
// input of the form's textarea when it is not empty, and goes to the new
// run's page.
func (s *Server) rerunForm(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	var task *store.Task
	err = s.snapshotFresh(ctx, func(st Reads) error {
		task, err = st.TaskGet(ctx, id)
		return notFoundAs(err, "task %d not found", id)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var opts []engine.RerunOption
	if in := strings.TrimSpace(r.PostFormValue("input")); in != "" {
		opts = append(opts, engine.WithRerunInput(json.RawMessage(in)))
	}
	run, err := s.eng.RerunFrom(ctx, task.RunID, task.Name, opts...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	setFlash(w, r, false, "Run #"+strconv.FormatInt(task.RunID, 10)+" rerun from task "+task.Name+": run #"+strconv.FormatInt(run.ID, 10)+".")
	http.Redirect(w, r, "/runs/"+strconv.FormatInt(run.ID, 10), http.StatusSeeOther)
}

// rerunRequest is the body of POST /api/runs/{id}/rerun.
type rerunRequest struct {
	Task  *string         `json:"task"`
	Input json.RawMessage `json:"input"`
}

// apiRerun reruns a finished run from a task (engine.RerunFrom): 201
// with the new run; 404 for an unknown run, 409 for one not finished or
// an upstream task not completed, 400 naming the field for an unknown
// task or a bad input.
func (s *Server) apiRerun(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "run")
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	var req rerunRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.apiFail(w, r, err)
		return
	}
	if req.Task == nil || *req.Task == "" {
		s.apiFail(w, r, badRequest("task: the name of the task to rerun from is required"))
		return
	}
	var opts []engine.RerunOption
	if len(req.Input) > 0 && string(req.Input) != "null" {
		opts = append(opts, engine.WithRerunInput(req.Input))
	}
	run, err := s.eng.RerunFrom(r.Context(), id, *req.Task, opts...)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": run.ID, "workflow": run.Workflow, "rerun_of": id, "rerun_from": *req.Task})
}
