package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// target is what an action applies to, read from the path, and its input.
type target struct {
	id   int64  // run or task id
	name string // queue or schedule name
	// maxRunning is the new cap of a set-cap action (nil: no cap).
	maxRunning *int
}

// result is the outcome of an action.
type result struct {
	msg   string
	runID int64 // a run the action created, if any
}

// action is one state-changing operation, offered both as a form POST
// (redirecting back with a flash message) and as a JSON API POST.
type action struct {
	path string // pattern without the method, e.g. "/tasks/{id}/retry"
	kind string // "task", "run", "queue" or "schedule"
	do   func(ctx context.Context, e Engine, t target) (result, error)
}

func msg(format string, args ...any) result { return result{msg: fmt.Sprintf(format, args...)} }

var actions = []action{
	{"/tasks/{id}/retry", "task", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Task #%d sent back to ready.", t.id), e.RetryTask(ctx, t.id)
	}},
	{"/tasks/{id}/requeue", "task", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Task #%d requeued.", t.id), e.RequeueTask(ctx, t.id)
	}},
	{"/tasks/{id}/cancel", "task", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Task #%d cancelled.", t.id), e.CancelTask(ctx, t.id)
	}},
	{wakePath, "task", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Task #%d checks what it waits for now.", t.id), e.Signal(ctx, t.id)
	}},
	{"/runs/{id}/cancel", "run", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Run #%d cancelled.", t.id), e.CancelRun(ctx, t.id)
	}},
	{"/runs/{id}/retry", "run", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Run #%d retried: its failed and cancelled tasks, and those skipped below them, start over.", t.id), e.RetryRun(ctx, t.id)
	}},
	{"/runs/{id}/pause", "run", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Run #%d paused.", t.id), e.PauseRun(ctx, t.id)
	}},
	{"/runs/{id}/resume", "run", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Run #%d resumed.", t.id), e.ResumeRun(ctx, t.id)
	}},
	{"/queues/{name}/pause", "queue", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Queue %s paused.", t.name), e.PauseQueue(ctx, t.name)
	}},
	{"/queues/{name}/resume", "queue", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Queue %s resumed.", t.name), e.ResumeQueue(ctx, t.name)
	}},
	{"/queues/{name}/cap", "queue", func(ctx context.Context, e Engine, t target) (result, error) {
		if t.maxRunning == nil {
			return msg("Queue %s has no cap now.", t.name), e.SetQueueCap(ctx, t.name, nil)
		}
		return msg("Queue %s capped at %d running tasks.", t.name, *t.maxRunning), e.SetQueueCap(ctx, t.name, t.maxRunning)
	}},
	{"/schedules/{name}/pause", "schedule", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Schedule %s paused.", t.name), e.PauseSchedule(ctx, t.name)
	}},
	{"/schedules/{name}/resume", "schedule", func(ctx context.Context, e Engine, t target) (result, error) {
		return msg("Schedule %s resumed.", t.name), e.ResumeSchedule(ctx, t.name)
	}},
	{"/schedules/{name}/fire", "schedule", func(ctx context.Context, e Engine, t target) (result, error) {
		run, err := e.FireSchedule(ctx, t.name)
		if err != nil {
			return result{}, err
		}
		return result{msg: fmt.Sprintf("Schedule %s fired: run #%d.", t.name, run.ID), runID: run.ID}, nil
	}},
}

// wakePath is the action that makes a deferred task check its condition
// (or durable wait) now, in whichever process holds it.
const wakePath = "/tasks/{id}/wake"

// precheck refuses, before it runs, an action the task's row shows cannot
// apply where the engine would not say so itself: waking a task that is
// not deferred (the engine's Signal only notifies).
func (s *Server) precheck(ctx context.Context, a action, t target) error {
	if a.path == wakePath {
		return s.checkWakeable(ctx, t.id)
	}
	return nil
}

// isCap reports whether the action takes a max_running input.
func (a action) isCap() bool { return strings.HasSuffix(a.path, "/cap") }

// target reads the action's path parameter.
func (a action) target(r *http.Request) (target, error) {
	switch a.kind {
	case "task", "run":
		id, err := pathID(r, a.kind)
		return target{id: id}, err
	}
	name := r.PathValue("name")
	if name == "" {
		return target{}, badRequest("bad %s name %q", a.kind, name)
	}
	if err := checkName(a.kind+" name", name); err != nil {
		return target{}, err
	}
	return target{name: name}, nil
}

// back is where a form action returns when the request has no Referer.
func (a action) back(t target) string {
	switch a.kind {
	case "task":
		return "/tasks/" + strconv.FormatInt(t.id, 10)
	case "run":
		return "/runs/" + strconv.FormatInt(t.id, 10)
	case "queue":
		return "/queues"
	}
	return "/schedules"
}

// parseCap reads a cap: "" means none.
func parseCap(s string) (*int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	// The range is the engine's to check (SetQueueCap).
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, badRequest("max_running %q: must be a whole number, or empty for no cap", s)
	}
	c := int(n)
	return &c, nil
}

// actionForm serves an action as a form POST: on success it redirects
// back (303) with a flash message; on failure it shows the error with its
// status.
func (s *Server) actionForm(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := a.target(r)
		if err == nil && a.isCap() {
			t.maxRunning, err = parseCap(r.PostFormValue("max_running"))
		}
		if err == nil {
			err = s.precheck(r.Context(), a, t)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		res, err := a.do(r.Context(), s.eng, t)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		setFlash(w, r, false, res.msg)
		http.Redirect(w, r, refererPath(r, a.back(t)), http.StatusSeeOther)
	}
}

// actionAPI serves an action as a JSON API POST.
func (s *Server) actionAPI(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := a.target(r)
		if err == nil && a.isCap() {
			var body struct {
				MaxRunning *int `json:"max_running"`
			}
			if err = decodeJSON(w, r, &body); err == nil {
				t.maxRunning = body.MaxRunning // its range is the engine's to check (SetQueueCap)
			}
		}
		if err == nil {
			err = s.precheck(r.Context(), a, t)
		}
		if err != nil {
			s.apiFail(w, r, err)
			return
		}
		res, err := a.do(r.Context(), s.eng, t)
		if err != nil {
			s.apiFail(w, r, err)
			return
		}
		out := map[string]any{"ok": true, "message": res.msg}
		if res.runID != 0 {
			out["run_id"] = res.runID
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// decodeJSON reads a JSON request body (at most 2 MiB) strictly: unknown
// fields and trailing data are errors, and so is a value PostgreSQL could
// not store (see checkJSONBody). An empty body decodes as {}. Its errors
// say what was wrong in the caller's terms (the field and what it
// expects), never in Go's.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2<<20))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("could not read the request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonBodyError(err)
	}
	if dec.More() {
		return badRequest("request body: more than one JSON value")
	}
	return checkJSONBody(body)
}

// jsonBodyError turns an encoding/json decoding error into a 400 that
// names the field and what it expects.
func jsonBodyError(err error) error {
	var mbe *http.MaxBytesError
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.As(err, &ute):
		if ute.Field == "" {
			return badRequest("request body must be a JSON object")
		}
		return badRequest("%s: expected %s, got %s", ute.Field, jsonKind(ute.Type), jsonValue(ute.Value))
	case errors.As(err, &se):
		return badRequest("request body is not valid JSON: %s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body is not valid JSON: it ends too early")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return badRequest("unknown field %s", f)
	}
	return badRequest("request body is not valid JSON")
}

// jsonKind says in JSON's terms what a Go type accepts.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number ≥ 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	}
	return "another kind of value"
}

// jsonValue describes the value encoding/json found ("number 1.5",
// "string", "array", ...).
func jsonValue(v string) string {
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	switch v {
	case "bool":
		return "true or false"
	case "number", "string":
		return "a " + v
	case "array", "object":
		return "an " + v
	}
	return v
}

// timeExample is how a time in a request should look.
const timeExample = "2026-01-02T15:04:05Z"

// parseJSONTime reads an RFC 3339 time given as a raw JSON value; null or
// absent is nil.
func parseJSONTime(field string, raw json.RawMessage) (*time.Time, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, badRequest("%s: expected a time like %s (RFC 3339, in quotes)", field, timeExample)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, badRequest("%s: expected a time like %s (RFC 3339), got %q", field, timeExample, s)
	}
	return &t, nil
}

// enqueueRequest is the body of POST /api/runs.
type enqueueRequest struct {
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input"`
	Key      string          `json:"key"`
	Queue    string          `json:"queue"`
	Priority *int            `json:"priority"`
	// RunAt is an RFC 3339 time, read by parseJSONTime.
	RunAt json.RawMessage `json:"run_at"`
	// UniqueFor is a Go duration ("24h"): the key stays held that long
	// after the run is created, whatever its state (engine.WithUniqueFor).
	UniqueFor string `json:"unique_for"`
	// After are runs the new run's root tasks wait for (engine.WithAfter).
	After []int64 `json:"after"`
	// AfterRule is their trigger rule (engine.WithAfterRule), e.g.
	// {"shorthand": "all_done"} or {"mode": "all", "conditions":
	// [{"kind": "run_failed", "run": 12}]}.
	AfterRule *engine.TriggerRule `json:"after_rule"`
	// Debounce is engine.WithDebounce.
	Debounce *enqueueDebounce `json:"debounce"`
	// Singleton is engine.WithSingleton's key.
	Singleton string `json:"singleton"`
}

// enqueueDebounce is engine.WithDebounce's key and waits, the waits Go
// durations ("2s").
type enqueueDebounce struct {
	Key     string `json:"key"`
	Wait    string `json:"wait"`
	MaxWait string `json:"max_wait"`
}

// enqueue turns the request into the engine's options and enqueues: it
// only parses what the engine takes typed (a duration, a time); the
// engine validates the rest, and its typed errors, which name the
// request's fields, become 4xx (see statusOf).
func (s *Server) enqueue(ctx context.Context, req enqueueRequest) (*engine.Run, error) {
	input := json.RawMessage(strings.TrimSpace(string(req.Input)))
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	var opts []engine.EnqueueOption
	if req.Key != "" {
		opts = append(opts, engine.WithKey(req.Key))
	}
	if req.Queue != "" {
		opts = append(opts, engine.WithQueue(req.Queue))
	}
	if req.Priority != nil {
		opts = append(opts, engine.WithPriority(*req.Priority))
	}
	if req.UniqueFor != "" {
		d, err := time.ParseDuration(req.UniqueFor)
		if err != nil {
			return nil, badRequest("unique_for: expected a positive duration like 24h or 90m, got %q", req.UniqueFor)
		}
		opts = append(opts, engine.WithUniqueFor(d))
	}
	runAt, err := parseJSONTime("run_at", req.RunAt)
	if err != nil {
		return nil, err
	}
	if runAt != nil {
		opts = append(opts, engine.WithRunAt(*runAt))
	}
	if len(req.After) > 0 {
		opts = append(opts, engine.WithAfter(req.After...))
	}
	if req.AfterRule != nil {
		opts = append(opts, engine.WithAfterRule(*req.AfterRule))
	}
	if d := req.Debounce; d != nil {
		if req.Singleton != "" {
			return nil, fieldError("singleton", "singleton: not with debounce (one key per run)")
		}
		var waits [2]time.Duration
		for i, f := range []struct{ name, v string }{{"wait", d.Wait}, {"max_wait", d.MaxWait}} {
			if waits[i], err = time.ParseDuration(f.v); err != nil {
				return nil, fieldError("debounce."+f.name, "debounce.%s: expected a duration like 2s or 5m, got %q", f.name, f.v)
			}
		}
		opts = append(opts, engine.WithDebounce(d.Key, waits[0], waits[1]))
	}
	if req.Singleton != "" {
		opts = append(opts, engine.WithSingleton(req.Singleton))
	}
	return s.eng.Enqueue(ctx, req.Workflow, input, opts...)
}

// startFormRequest reads the "Start a run" form; f holds the values as
// sent, to show them again when they are refused. Any of the debounce
// fields asks for a debounce, so that a wait without a key is refused.
func startFormRequest(r *http.Request) (enqueueRequest, templates.StartForm) {
	val := func(name string) string { return strings.TrimSpace(r.PostFormValue(name)) }
	f := templates.StartForm{
		Workflow: val("workflow"), Input: r.PostFormValue("input"), Key: val("key"),
		DebounceKey: val("debounce_key"), DebounceWait: val("debounce_wait"), DebounceMaxWait: val("debounce_max_wait"),
		Singleton: val("singleton"),
	}
	req := enqueueRequest{Workflow: f.Workflow, Input: json.RawMessage(f.Input), Key: f.Key, Singleton: f.Singleton}
	if f.DebounceKey != "" || f.DebounceWait != "" || f.DebounceMaxWait != "" {
		req.Debounce = &enqueueDebounce{Key: f.DebounceKey, Wait: f.DebounceWait, MaxWait: f.DebounceMaxWait}
	}
	return req, f
}

func (s *Server) enqueueForm(w http.ResponseWriter, r *http.Request) {
	req, f := startFormRequest(r)
	run, err := s.enqueue(r.Context(), req)
	if err != nil {
		if !s.startRefused(w, r, f, err) {
			s.fail(w, r, err)
		}
		return
	}
	setFlash(w, r, false, startedMessage(req, run))
	http.Redirect(w, r, "/runs/"+strconv.FormatInt(run.ID, 10), http.StatusSeeOther)
}

// startedMessage is the flash of a successful start: a new run, or the
// one that held the request's key.
func startedMessage(req enqueueRequest, run *engine.Run) string {
	replaces := req.Debounce != nil || req.Singleton != ""
	switch {
	case !run.Existing:
		return fmt.Sprintf("Started run #%d of %s.", run.ID, run.Workflow)
	case replaces && req.Key != "":
		// Either key may have been the one held: the engine does not say.
		return fmt.Sprintf("No new run: run #%d holds the idempotency key, or was queued with that key and took the new input.", run.ID)
	case replaces:
		return fmt.Sprintf("No new run: queued run #%d of %s was updated with the new input.", run.ID, run.Workflow)
	}
	return fmt.Sprintf("Run #%d already holds that key.", run.ID)
}

// startRefused shows the runs page again with the start form open, the
// values as sent and the error beside its field, when err is the user's
// mistake (4xx other than 404); it reports whether it did.
func (s *Server) startRefused(w http.ResponseWriter, r *http.Request, f templates.StartForm, err error) bool {
	status, msg := statusOf(err)
	if status < 400 || status >= 500 || status == http.StatusNotFound {
		return false
	}
	v, verr := s.runsView(w, r)
	if verr != nil {
		s.fail(w, r, verr)
		return true
	}
	f.Workflows = v.Start.Workflows
	f.Error = templates.FieldError{Field: startField(err), Message: msg}
	v.Start = f
	s.render(w, r, status, templates.RunsPage(v))
	return true
}

// startFields are the start form's fields that the engine's refusals
// name: its ErrInvalidInput messages read "invalid input: <field>: ...".
var startFields = []string{"workflow", "key", "debounce", "singleton"}

// startField is the start form field err concerns: the field of an
// httpError, the one an engine refusal names, else "" (shown above the
// form).
func startField(err error) string {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.field
	case errors.Is(err, engine.ErrUnknownWorkflow):
		return "workflow"
	case errors.Is(err, engine.ErrInputTooLarge):
		return "input"
	case errors.Is(err, engine.ErrInvalidInput):
		for _, f := range startFields {
			if strings.Contains(err.Error(), engine.ErrInvalidInput.Error()+": "+f+":") {
				return f
			}
		}
	}
	return ""
}

// bulkPlan is what a bulk action would touch.
type bulkPlan struct {
	action string
	runs   []int64
	tasks  []int64 // retry: the failed tasks of runs; requeue: the interrupted ones
	capped bool    // more than BulkLimit runs match
	// interrupted counts, for retry, the matching runs left alone
	// because their tasks are interrupted, not failed or cancelled.
	interrupted int
}

// bulkActions are the actions on many runs.
var bulkActions = []string{"cancel", "retry", "requeue", "delete"}

// finishedRunStatuses are the statuses a run can be deleted in.
var finishedRunStatuses = store.RunFinishedStatuses()

// planBulk finds the runs (at most BulkLimit, newest first) matching the
// filter that a bulk action applies to: for "cancel" the unfinished ones,
// for "retry" those with failed or cancelled tasks, and those tasks, for
// "requeue" those with interrupted tasks, and those tasks, for "delete"
// the finished ones.
func (s *Server) planBulk(ctx context.Context, act string, f templates.RunFilter) (*bulkPlan, error) {
	p, err := runParams(f)
	if err != nil {
		return nil, err
	}
	plan := &bulkPlan{action: act}
	switch act {
	case "cancel":
		switch {
		case len(p.Statuses) == 0:
			p.Statuses = liveRunStatuses
		case !slices.Contains(liveRunStatuses, p.Statuses[0]):
			return plan, nil // finished runs cannot be cancelled
		}
	case "delete":
		switch {
		case len(p.Statuses) == 0:
			p.Statuses = finishedRunStatuses
		case !slices.Contains(finishedRunStatuses, p.Statuses[0]):
			return plan, nil // unfinished runs cannot be deleted
		}
	case "retry", "requeue":
	default:
		return nil, badAction(act)
	}
	p.Limit = BulkLimit + 1
	ids, err := s.st.RunIDListFiltered(ctx, &p)
	if err != nil {
		return nil, err
	}
	if len(ids) > BulkLimit {
		ids, plan.capped = ids[:BulkLimit], true
	}
	plan.runs = ids
	if act == "retry" || act == "requeue" {
		states := []string{store.StatusFailed, store.StatusCancelled}
		if act == "requeue" {
			states = []string{store.StatusInterrupted}
		}
		refs, err := s.st.TaskRefListByRunsStatuses(ctx, ids, states)
		if err != nil {
			return nil, err
		}
		plan.runs = plan.runs[:0] // only the runs that have such tasks
		for _, t := range refs {
			plan.tasks = append(plan.tasks, t.ID)
			if n := len(plan.runs); n == 0 || plan.runs[n-1] != t.RunID {
				plan.runs = append(plan.runs, t.RunID)
			}
		}
		if act == "retry" {
			others := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return slices.Contains(plan.runs, id) })
			if plan.interrupted, err = s.interruptedRuns(ctx, others); err != nil {
				return nil, err
			}
		}
	}
	return plan, nil
}

// interruptedRuns counts those of runs that have an interrupted task.
func (s *Server) interruptedRuns(ctx context.Context, runs []int64) (int, error) {
	refs, err := s.st.TaskRefListByRunsStatuses(ctx, runs, []string{store.StatusInterrupted})
	if err != nil {
		return 0, err
	}
	var n int
	for i, t := range refs {
		if i == 0 || refs[i-1].RunID != t.RunID {
			n++
		}
	}
	return n, nil
}

// retryNote says why a bulk retry left n interrupted runs alone, if any.
func retryNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s with interrupted tasks left alone: retry acts on failed and cancelled tasks; requeue interrupted ones (bulk action requeue).", plural(n, "run"))
}

// filterSet reports whether f narrows the runs: one of its fields is set.
func filterSet(f templates.RunFilter) bool {
	return slices.ContainsFunc([]string{f.Workflow, f.Status, f.From, f.To, f.Q}, func(v string) bool {
		return strings.TrimSpace(v) != ""
	})
}

// noSelection refuses a bulk action that names no runs: every bulk
// action needs an explicit selection (ids, a filter, or all), so that a
// stray request does not act on every run. choices names them as the
// caller spells them.
func noSelection(act, choices string) error {
	return badRequest("bulk %s needs a selection: %s", act, choices)
}

// badAction is the error of an unknown bulk action.
func badAction(act string) error {
	return fieldError("action", "bulk action %q: must be one of %s", act, strings.Join(bulkActions, ", "))
}

// applyBulk performs a bulk action on runs through the engine: one
// transaction per engine.BulkBatch runs. Runs that moved meanwhile (not
// found, or no longer in a state the action applies to) are skipped.
func (s *Server) applyBulk(ctx context.Context, act string, runs []int64) (engine.BulkResult, error) {
	switch act {
	case "cancel":
		return s.eng.CancelRuns(ctx, runs)
	case "retry":
		return s.eng.RetryRuns(ctx, runs)
	case "requeue":
		return s.eng.RequeueRuns(ctx, runs)
	case "delete":
		return s.eng.DeleteRuns(ctx, runs)
	}
	return engine.BulkResult{}, badAction(act)
}

// bulkMessage says what a bulk action did; note (see retryNote) is
// added when set.
func bulkMessage(act string, res engine.BulkResult, note string) string {
	verb, why := "Retried", "nothing failed or was cancelled in them"
	switch act {
	case "cancel":
		verb, why = "Cancelled", "they had finished"
	case "requeue":
		verb, why = "Requeued", "no task of theirs was interrupted"
	case "delete":
		verb, why = "Deleted", "they had not finished"
	}
	m := fmt.Sprintf("%s %s.", verb, plural(len(res.Done), "run"))
	if n := len(res.Skipped); n > 0 {
		m = fmt.Sprintf("%s %s; %d skipped because %s.", verb, plural(len(res.Done), "run"), n, why)
	}
	if note != "" {
		m += " " + note
	}
	return m
}

// skippedNote is the note of a bulk action's result: for retry, why the
// skipped runs with interrupted tasks were left alone.
func (s *Server) skippedNote(ctx context.Context, act string, res engine.BulkResult, planned int) string {
	if act != "retry" {
		return ""
	}
	n, err := s.interruptedRuns(ctx, res.Skipped)
	if err != nil {
		s.log.DebugContext(ctx, "count interrupted runs", slog.Any("error", err))
	}
	return retryNote(n + planned)
}

// plural is "1 run", "2 runs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// parseRunIDs reads the run ids of a selection: 1 to BulkLimit positive
// whole numbers.
func parseRunIDs(field string, vals []string) ([]int64, error) {
	if len(vals) == 0 {
		return nil, fieldError(field, "%s: no runs selected: tick the runs to act on, or select all matching", field)
	}
	if len(vals) > BulkLimit {
		return nil, fieldError(field, "%s: %d runs selected; at most %d at a time", field, len(vals), BulkLimit)
	}
	ids := make([]int64, len(vals))
	for i, v := range vals {
		id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || id <= 0 {
			return nil, fieldError(field, "%s: run id %q must be a positive whole number", field, clip(v, 40))
		}
		ids[i] = id
	}
	return ids, nil
}

// logBulk logs a bulk action and who asked for it (the engine logs each
// run or task it touched as well).
func (s *Server) logBulk(ctx context.Context, act string, runs int, res engine.BulkResult, err error) {
	actor, _ := engine.ActorFrom(ctx)
	s.log.InfoContext(ctx, "bulk action", slog.String("action", act), slog.Int("runs", runs),
		slog.Int("done", len(res.Done)), slog.Int("skipped", len(res.Skipped)), slog.Any("error", err),
		slog.String("actor", actor.Name), slog.String("role", actor.Role), slog.String("addr", actor.Addr))
}

// bulkTimeout bounds a bulk action, which goes on when the browser leaves.
const bulkTimeout = 2 * time.Minute

// bulkForm serves POST /runs/bulk. With run ids (id, repeated: a
// selection of the runs list) it acts on them at once and redirects back
// to the list with a flash saying what it did. With all=1 ("select all
// matching") or a filter that sets a field, it acts on the runs matching
// the filter (every run without one): without confirm=yes it shows what
// the action would touch and asks to confirm, asking again for all=1
// when no filter is set; with it, it acts and redirects to the filtered
// runs list. With none of these it refuses (400) and changes nothing.
func (s *Server) bulkForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			err = badRequest("form data could not be read: %v", err)
		}
		s.fail(w, r, err)
		return
	}
	f := runFilterFrom(r.PostForm)
	act := r.PostFormValue("action")
	back := "/runs"
	if q := filterQuery(f); len(q) > 0 {
		back += "?" + q.Encode()
	}
	all := r.PostFormValue("all") == "1"
	if !all && (r.PostFormValue("select") == "1" || len(r.PostForm["id"]) > 0) {
		s.bulkSelection(w, r, act, back)
		return
	}
	if !slices.Contains(bulkActions, act) {
		s.fail(w, r, badAction(act))
		return
	}
	if !all && !filterSet(f) {
		s.fail(w, r, noSelection(act, "runs ticked on the list (id), a filter, or all=1 (every run)"))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		plan, err := s.planBulk(r.Context(), act, f)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.render(w, r, http.StatusOK, templates.ConfirmPage(templates.ConfirmView{
			Page: s.page(w, r, "Confirm bulk "+act, "runs"), Action: act, Filter: f,
			Runs: len(plan.runs), Tasks: len(plan.tasks), Limit: BulkLimit, Capped: plan.capped, Back: back,
			All: !filterSet(f), Note: retryNote(plan.interrupted),
		}))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bulkTimeout)
	defer cancel()
	plan, err := s.planBulk(ctx, act, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.applyBulk(ctx, act, plan.runs)
	s.logBulk(ctx, act, len(plan.runs), res, err)
	if err != nil {
		s.fail(w, r, fmt.Errorf("bulk %s stopped after %d runs: %w", act, len(res.Done), err))
		return
	}
	setFlash(w, r, false, bulkMessage(act, res, s.skippedNote(ctx, act, res, plan.interrupted)))
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// bulkSelection acts on the runs selected on the runs list (the form's
// id values) and redirects back with a flash saying what it did.
func (s *Server) bulkSelection(w http.ResponseWriter, r *http.Request, act, back string) {
	if !slices.Contains(bulkActions, act) {
		s.fail(w, r, badAction(act))
		return
	}
	ids, err := parseRunIDs("id", r.PostForm["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bulkTimeout)
	defer cancel()
	res, err := s.applyBulk(ctx, act, ids)
	s.logBulk(ctx, act, len(ids), res, err)
	if err != nil {
		s.fail(w, r, fmt.Errorf("bulk %s stopped after %d runs: %w", act, len(res.Done), err))
		return
	}
	setFlash(w, r, false, bulkMessage(act, res, s.skippedNote(ctx, act, res, 0)))
	http.Redirect(w, r, back, http.StatusSeeOther)
}
