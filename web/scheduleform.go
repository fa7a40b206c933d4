package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// The schedule form pages: create and edit, with a live preview of the
// expression's next fires, and delete.

// preview computes the next fires of an expression from now.
func (s *Server) preview(expression, timezone string) templates.SchedulePreview {
	if strings.TrimSpace(expression) == "" {
		return templates.SchedulePreview{Empty: true}
	}
	fires, err := engine.NextFires(expression, timezone, s.clock(), nextFiresShown)
	if err != nil {
		msg := err.Error()
		var se *engine.ScheduleError
		if errors.As(err, &se) {
			msg = se.Field + " " + strconv.Quote(se.Value) + ": " + se.Err.Error()
		}
		return templates.SchedulePreview{Error: msg}
	}
	p := templates.SchedulePreview{}
	for _, f := range fires {
		p.Fires = append(p.Fires, f.Format("Mon 2006-01-02 15:04 MST"))
	}
	if len(p.Fires) == 0 {
		p.Error = "expression never fires"
	}
	return p
}

// schedulePreviewFragment serves the form's live preview: the next fires
// of ?expression= read in ?timezone=, or (400) what is wrong with them.
func (s *Server) schedulePreviewFragment(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := s.preview(q.Get("expression"), q.Get("timezone"))
	status := http.StatusOK
	if p.Error != "" {
		status = http.StatusBadRequest
	}
	s.render(w, r, status, templates.SchedulePreviewPart(p))
}

// scheduleForm is the form with the workflows offered (every stored or
// registered one, see workflowNames; those registered here when the
// database cannot say) and the preview of what it holds.
func (s *Server) scheduleForm(ctx context.Context, f templates.ScheduleForm) templates.ScheduleForm {
	names, err := s.workflowNames(ctx)
	if err != nil {
		names = s.eng.Workflows()
	}
	f.Workflows = names
	f.Preview = s.preview(f.Expression, f.Timezone)
	return f
}

// readonlyForm refuses (403) the form pages to the read-only role, which
// could not send them.
func (s *Server) readonlyForm(w http.ResponseWriter, r *http.Request) bool {
	if sessionFrom(r.Context()).canWrite() {
		return false
	}
	s.forbidden(w, r, "read-only access: changing schedules needs the admin login")
	return true
}

func (s *Server) scheduleNewPage(w http.ResponseWriter, r *http.Request) {
	if s.readonlyForm(w, r) {
		return
	}
	f := s.scheduleForm(r.Context(), templates.ScheduleForm{Action: "/schedules", Timezone: "UTC", CatchUp: engine.CatchUpSkip, Input: "{}"})
	s.render(w, r, http.StatusOK, templates.ScheduleFormPage(templates.ScheduleFormView{Page: s.page(w, r, "New schedule", "schedules"), Form: f}))
}

func (s *Server) scheduleEditPage(w http.ResponseWriter, r *http.Request) {
	if s.readonlyForm(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := checkName("schedule name", name); err != nil {
		s.fail(w, r, err)
		return
	}
	var sc *store.Schedule
	err := s.readFresh(r.Context(), func(st Reads) (err error) {
		sc, err = st.ScheduleGet(r.Context(), name)
		return notFoundAs(err, "schedule %q not found", name)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := s.scheduleForm(r.Context(), templates.ScheduleForm{
		Edit: true, Action: "/schedules/" + sc.Name, Name: sc.Name, Expression: sc.Expression, Timezone: sc.Timezone,
		Workflow: sc.Workflow, Input: prettyJSON(sc.Input), CatchUp: sc.CatchUp, MaxCatchUp: strconv.Itoa(sc.MaxCatchUp),
		Paused: sc.Paused,
	})
	s.render(w, r, http.StatusOK, templates.ScheduleFormPage(templates.ScheduleFormView{Page: s.page(w, r, "Edit schedule "+sc.Name, "schedules"), Form: f}))
}

// scheduleFormRequest reads the schedule form; f holds the values as
// sent, to show them again when they are refused.
func scheduleFormRequest(r *http.Request) (scheduleRequest, templates.ScheduleForm, error) {
	f := templates.ScheduleForm{
		Name: strings.TrimSpace(r.PostFormValue("name")), Expression: r.PostFormValue("expression"),
		Timezone: strings.TrimSpace(r.PostFormValue("timezone")), Workflow: r.PostFormValue("workflow"),
		Input: r.PostFormValue("input"), CatchUp: r.PostFormValue("catch_up"),
		MaxCatchUp: strings.TrimSpace(r.PostFormValue("max_catch_up")), Paused: r.PostFormValue("paused") == "yes",
	}
	req := scheduleRequest{Name: f.Name, Expression: f.Expression, Timezone: f.Timezone, Workflow: f.Workflow,
		Input: json.RawMessage(f.Input), CatchUp: f.CatchUp}
	if f.MaxCatchUp != "" {
		n, err := strconv.Atoi(f.MaxCatchUp)
		if err != nil {
			return req, f, fieldError("max_catch_up", "max_catch_up %q: must be a whole number from 1 to %d", f.MaxCatchUp, engine.MaxMaxCatchUp)
		}
		req.MaxCatchUp = n
	}
	if f.Input != "" && strings.TrimSpace(f.Input) != "" && !json.Valid([]byte(f.Input)) {
		return req, f, fieldError("input", "input: not valid JSON")
	}
	return req, f, nil
}

// formRefused shows the form again with the values as sent and the error
// beside its field, when err is the user's mistake (4xx other than 404);
// it reports whether it did.
func (s *Server) formRefused(w http.ResponseWriter, r *http.Request, title string, f templates.ScheduleForm, err error) bool {
	status, msg := statusOf(err)
	if status < 400 || status >= 500 || status == http.StatusNotFound {
		return false
	}
	field := ""
	var he *httpError
	if errors.As(err, &he) {
		field = he.field
	}
	f = s.scheduleForm(r.Context(), f)
	f.Error = templates.FieldError{Field: field, Message: msg}
	s.render(w, r, status, templates.ScheduleFormPage(templates.ScheduleFormView{Page: s.page(w, r, title, "schedules"), Form: f}))
	return true
}

func (s *Server) scheduleCreateForm(w http.ResponseWriter, r *http.Request) {
	req, f, err := scheduleFormRequest(r)
	f.Action = "/schedules"
	if err == nil {
		if f.Paused {
			paused := true
			req.Paused = &paused
		}
		err = s.createSchedule(r.Context(), req)
	}
	if err != nil {
		if !s.formRefused(w, r, "New schedule", f, err) {
			s.fail(w, r, err)
		}
		return
	}
	setFlash(w, r, false, fmt.Sprintf("Schedule %s created.", req.Name))
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}

func (s *Server) scheduleUpdateForm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, f, err := scheduleFormRequest(r)
	f.Edit, f.Action, f.Name = true, "/schedules/"+name, name
	req.Name = name
	if err == nil {
		err = s.updateSchedule(r.Context(), name, req)
	}
	if err != nil {
		if !s.formRefused(w, r, "Edit schedule "+name, f, err) {
			s.fail(w, r, err)
		}
		return
	}
	setFlash(w, r, false, fmt.Sprintf("Schedule %s saved.", name))
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}

func (s *Server) scheduleDeleteForm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.deleteSchedule(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	setFlash(w, r, false, fmt.Sprintf("Schedule %s deleted.", name))
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
}
