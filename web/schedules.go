package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// Creating, editing and deleting schedules, for the JSON API and the
// form pages (scheduleform.go). All of it goes through the engine's
// CreateSchedule, UpdateSchedule and DeleteSchedule, which validate;
// their *engine.ScheduleError becomes a 400 naming the field.

// scheduleRequest is the body of POST /api/schedules and PUT
// /api/schedules/{name}, and what the form sends.
type scheduleRequest struct {
	Name       string          `json:"name"`
	Expression string          `json:"expression"`
	Timezone   string          `json:"timezone"`
	Workflow   string          `json:"workflow"`
	Input      json.RawMessage `json:"input"`
	CatchUp    string          `json:"catch_up"`
	MaxCatchUp int             `json:"max_catch_up"`
	// Paused creates the schedule paused. An update keeps the stored
	// state: pause and resume have their own actions.
	Paused *bool `json:"paused"`
}

// schedule checks the request's text and returns the engine's schedule.
func (req scheduleRequest) schedule() (engine.Schedule, error) {
	for _, f := range []struct{ field, v string }{
		{"name", req.Name}, {"workflow", req.Workflow}, {"timezone", req.Timezone}, {"catch_up", req.CatchUp},
	} {
		if err := checkName(f.field, f.v); err != nil {
			return engine.Schedule{}, inField(f.field, err)
		}
	}
	if err := checkText("expression", req.Expression); err != nil {
		return engine.Schedule{}, inField("expression", err)
	}
	if strings.TrimSpace(req.Workflow) == "" {
		return engine.Schedule{}, fieldError("workflow", "workflow is required")
	}
	input := json.RawMessage(strings.TrimSpace(string(req.Input)))
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	return engine.Schedule{
		Name: req.Name, Expression: req.Expression, Timezone: req.Timezone, Workflow: req.Workflow, Input: input,
		CatchUp: req.CatchUp, MaxCatchUp: req.MaxCatchUp, Paused: req.Paused != nil && *req.Paused,
	}, nil
}

// scheduleError turns the engine's *ScheduleError into a 400 naming its
// field (a 413 for an input too large); other errors pass through.
func scheduleError(err error) error {
	var se *engine.ScheduleError
	if !errors.As(err, &se) || errors.Is(err, engine.ErrInputTooLarge) {
		return err
	}
	return fieldError(se.Field, "%s", se.Error())
}

// logSchedule logs a schedule change and who asked for it.
func (s *Server) logSchedule(ctx context.Context, action, name string) {
	actor, _ := engine.ActorFrom(ctx)
	s.log.InfoContext(ctx, "schedule "+action, slog.String("schedule", name),
		slog.String("actor", actor.Name), slog.String("role", actor.Role), slog.String("addr", actor.Addr))
}

func (s *Server) createSchedule(ctx context.Context, req scheduleRequest) error {
	sc, err := req.schedule()
	if err != nil {
		return err
	}
	if err := s.eng.CreateSchedule(ctx, sc); err != nil {
		if errors.Is(err, engine.ErrScheduleExists) {
			return &httpError{status: http.StatusConflict, field: "name", msg: fmt.Sprintf("name: a schedule named %q already exists", sc.Name)}
		}
		return scheduleError(err)
	}
	s.logSchedule(ctx, "created", sc.Name)
	return nil
}

func (s *Server) updateSchedule(ctx context.Context, name string, req scheduleRequest) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	if req.Name != "" && req.Name != name {
		return fieldError("name", "name %q: a schedule cannot be renamed (it is %q): create a new one and delete this one", req.Name, name)
	}
	if req.Paused != nil {
		return fieldError("paused", "paused: an update keeps the schedule's state: use /api/schedules/%s/pause or /resume", name)
	}
	req.Name = name
	sc, err := req.schedule()
	if err != nil {
		return err
	}
	if err := s.eng.UpdateSchedule(ctx, sc); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			return notFound("schedule %q not found", name)
		}
		return scheduleError(err)
	}
	s.logSchedule(ctx, "updated", name)
	return nil
}

func (s *Server) deleteSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	if err := s.eng.DeleteSchedule(ctx, name); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			return notFound("schedule %q not found", name)
		}
		return err
	}
	s.logSchedule(ctx, "deleted", name)
	return nil
}

// scheduleOut is a schedule as the API answers it, with its next fires.
func (s *Server) scheduleOut(ctx context.Context, name string) (scheduleJSON, error) {
	var sc *store.Schedule
	err := s.readFresh(ctx, func(st Reads) (err error) {
		sc, err = st.ScheduleGet(ctx, name)
		return notFoundAs(err, "schedule %q not found", name)
	})
	if err != nil {
		return scheduleJSON{}, err
	}
	out := scheduleJSON{Schedule: *sc}
	fires, err := nextFires(*sc, s.clock(), nextFiresShown)
	if err != nil {
		out.Error = err.Error()
	}
	out.NextFires = nonNil(fires)
	return out, nil
}

func (s *Server) apiScheduleCreate(w http.ResponseWriter, r *http.Request) {
	var req scheduleRequest
	err := decodeJSON(w, r, &req)
	if err == nil {
		err = s.createSchedule(r.Context(), req)
	}
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	out, err := s.scheduleOut(r.Context(), req.Name)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"schedule": out})
}

func (s *Server) apiScheduleUpdate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req scheduleRequest
	err := decodeJSON(w, r, &req)
	if err == nil {
		err = s.updateSchedule(r.Context(), name, req)
	}
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	out, err := s.scheduleOut(r.Context(), name)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedule": out})
}

func (s *Server) apiScheduleDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.deleteSchedule(r.Context(), name); err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "message": fmt.Sprintf("Schedule %s deleted.", name)})
}
