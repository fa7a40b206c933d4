package web

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// The workflows page and GET /api/workflows: every workflow a worker
// stored (workflow_versions, whichever process registered it) and every
// one this process registers, each described by its newest stored
// version, with its versions and how their deploy stands
// (cairn_workflow_versions), its tasks' options and the live workers that
// register them (routing: a worker runs a task when "workflow.task" is
// among its handles, or when it declared no routing).

// workflowView is one workflow and the live workers that run each of its
// tasks.
type workflowView struct {
	def engine.WorkflowDef
	// versions are its stored versions, newest first; none for a
	// workflow only this process registers, not stored (yet).
	versions []store.WorkflowVersionState
	// workers[i] are the live workers registering task i.
	workers [][]store.WorkerHandles
	// any are the live workers registering at least one task.
	any []store.WorkerHandles
}

// decodeDef reads a stored definition (engine.WorkflowDef as JSON). A
// definition it cannot read describes the workflow by its name only.
func decodeDef(v store.WorkflowVersionState) engine.WorkflowDef {
	var d engine.WorkflowDef
	if err := json.Unmarshal(v.Definition, &d); err != nil {
		d = engine.WorkflowDef{}
	}
	d.Name = v.Workflow
	return d
}

// workflowViews reads the stored workflows (one when name is not "")
// and the live workers, and matches them. A workflow this process
// registers and nothing stored is described as registered here.
func (s *Server) workflowViews(ctx context.Context, name string) ([]workflowView, int, error) {
	st := s.reads(ctx)
	ws, err := st.WorkerHandlesList(ctx)
	if err != nil {
		return nil, 0, err
	}
	stored, err := st.WorkflowVersionList(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	var out []workflowView
	for i := 0; i < len(stored); {
		j := i + 1
		for j < len(stored) && stored[j].Workflow == stored[i].Workflow {
			j++
		}
		out = append(out, workflowView{def: decodeDef(stored[i]), versions: stored[i:j]})
		i = j
	}
	for _, d := range s.eng.WorkflowDefs() {
		if (name == "" || d.Name == name) && !slices.ContainsFunc(out, func(v workflowView) bool { return v.def.Name == d.Name }) {
			out = append(out, workflowView{def: d})
		}
	}
	slices.SortFunc(out, func(a, b workflowView) int { return cmp.Compare(a.def.Name, b.def.Name) })
	for i := range out {
		v := &out[i]
		v.workers = make([][]store.WorkerHandles, len(v.def.Tasks))
		for _, w := range ws {
			used := false
			for j, t := range v.def.Tasks {
				if registers(w, t) {
					v.workers[j] = append(v.workers[j], w)
					used = true
				}
			}
			if used {
				v.any = append(v.any, w)
			}
		}
	}
	return out, len(ws), nil
}

// workflowNames lists every workflow a run can be started of: those
// stored and those this process registers, sorted.
func (s *Server) workflowNames(ctx context.Context) ([]string, error) {
	names, err := s.reads(ctx).WorkflowNameList(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range s.eng.Workflows() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// registers reports whether worker w runs task t: t is among its handles,
// or it declared no routing and serves t's queue.
func registers(w store.WorkerHandles, t engine.TaskDef) bool {
	if w.Handles == nil {
		_, ok := w.Queues[t.Queue]
		return ok
	}
	return slices.Contains(w.Handles, t.Handle)
}

func workerLabel(w store.WorkerHandles) string {
	return w.Name + " #" + strconv.FormatInt(w.WorkerID, 10)
}

func workerLabels(ws []store.WorkerHandles) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = workerLabel(w)
	}
	return out
}

// runsHref lists the runs of a workflow.
func runsHref(workflow string) string {
	return "/runs?" + url.Values{"workflow": {workflow}}.Encode()
}

// fmtSpan renders a configured duration briefly: "5m", "1h30m", "1.5s".
func fmtSpan(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// retriesLabel describes a task's retry policy.
func retriesLabel(t engine.TaskDef) string {
	if t.MaxAttempts == 1 {
		return "1 attempt, no retry"
	}
	s := fmt.Sprintf("%d attempts, backoff %s ×%g up to %s", t.MaxAttempts, fmtSpan(t.InitialDelay), t.BackoffFactor, fmtSpan(t.MaxDelay))
	if t.Jitter {
		s += " ±10%"
	}
	switch {
	case len(t.RetryOn) > 0:
		s += "; only errors containing " + strings.Join(quoteAll(t.RetryOn), " or ")
	case t.RetryFiltered:
		s += "; only errors RetryIf accepts"
	}
	return s
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// triggerLabel renders a trigger rule as its shorthand, or as
// "any(failed(a), context(x eq 1))".
func triggerLabel(r engine.TriggerRule) string {
	if r.Shorthand != "" {
		return r.Shorthand
	}
	conds := make([]string, len(r.Conditions))
	for i, c := range r.Conditions {
		if c.Kind == "context" {
			if c.Op == "exists" || c.Op == "not_exists" {
				conds[i] = fmt.Sprintf("context(%s %s)", c.Key, c.Op)
			} else {
				conds[i] = fmt.Sprintf("context(%s %s %v)", c.Key, c.Op, c.Value)
			}
			continue
		}
		conds[i] = c.Kind + "(" + c.Task + ")"
	}
	return r.Mode + "(" + strings.Join(conds, ", ") + ")"
}

// flowLabel describes a key: "per customer" or "" for one limit.
func flowLabel(key string) string {
	if key == "" {
		return ""
	}
	return " per " + key
}

func concurrencyLabel(c *engine.Concurrency) string {
	if c == nil {
		return "–"
	}
	return fmt.Sprintf("%d at once%s · group %s", c.Max, flowLabel(c.Key), c.Group)
}

func rateLabel(r *engine.RateLimit) string {
	if r == nil {
		return "–"
	}
	return fmt.Sprintf("%d per %s%s · group %s", r.Limit, fmtSpan(r.Per), flowLabel(r.Key), r.Group)
}

// workflowCard builds the page's view of one workflow.
func workflowCard(v workflowView) templates.WorkflowCard {
	d := v.def
	c := templates.WorkflowCard{Name: d.Name, Queue: d.Queue, RunsHref: runsHref(d.Name), Workers: workerLabels(v.any)}
	for _, sv := range v.versions {
		c.Versions = append(c.Versions, versionRow(sv))
	}
	if len(v.versions) > 0 {
		c.Version = v.versions[0].Version
	}
	idx := make(map[string]int, len(d.Tasks))
	for i, t := range d.Tasks {
		idx[t.Name] = i
	}
	items := make([]dagItem, len(d.Tasks))
	for i, t := range d.Tasks {
		anchor := "wf-" + d.Name + "-" + t.Name
		deps := make([]int, len(t.Deps))
		for j, dep := range t.Deps {
			deps[j] = idx[dep]
		}
		detail := t.Queue
		if t.MaxAttempts != engine.DefaultMaxAttempts {
			detail += fmt.Sprintf(" · %d attempts", t.MaxAttempts)
		}
		items[i] = dagItem{idx: i, deps: deps, name: t.Name, detail: detail, href: "#" + anchor}
		row := templates.WorkflowTaskRow{
			Name: t.Name, Anchor: anchor, Deps: strings.Join(t.Deps, ", "), Queue: t.Queue, Priority: "run's",
			Retries: retriesLabel(t), Timeout: fmtSpan(t.Timeout), Trigger: triggerLabel(t.Trigger),
			RequeueOnInterrupt: t.RequeueOnInterrupt, Concurrency: concurrencyLabel(t.Concurrency), RateLimit: rateLabel(t.RateLimit),
			Workers: workerLabels(v.workers[i]),
		}
		if row.Deps == "" {
			row.Deps = "–"
		}
		if t.Priority != nil {
			row.Priority = strconv.Itoa(*t.Priority)
		}
		if len(v.workers[i]) == 0 {
			c.Unrouted++
		}
		c.Tasks = append(c.Tasks, row)
	}
	c.DAG = layoutItems(items)
	return c
}

// taskNames lists a definition's tasks: "a, b, c".
func taskNames(d engine.WorkflowDef) string {
	names := make([]string, len(d.Tasks))
	for i, t := range d.Tasks {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// versionRow builds the page's view of one stored version.
func versionRow(v store.WorkflowVersionState) templates.WorkflowVersionRow {
	return templates.WorkflowVersionRow{
		Version: v.Version, Tasks: taskNames(decodeDef(v)), Compatible: strings.Join(v.Compatible, ", "),
		Registered: stamp(v.RegisteredAt), Seen: stamp(v.SeenAt),
		Pending: v.Pending, Running: v.Running, Paused: v.Paused, Interrupted: v.Interrupted, InFlight: v.InFlight,
		Workers: v.WorkerNames, Newest: v.Newest, Retirable: v.Retirable,
	}
}

func (s *Server) workflowsLive(ctx context.Context) (templates.WorkflowsLive, error) {
	vs, workers, err := s.workflowViews(ctx, "")
	if err != nil {
		return templates.WorkflowsLive{}, err
	}
	l := templates.WorkflowsLive{Workers: workers}
	for _, v := range vs {
		l.Workflows = append(l.Workflows, workflowCard(v))
	}
	return l, nil
}

func (s *Server) workflowsPage(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.WorkflowsView, error) {
		l, err := s.workflowsLive(r.Context())
		return templates.WorkflowsView{Page: s.page(w, r, "Workflows", "workflows"), Live: l}, err
	}, templates.WorkflowsPage)
}

func (s *Server) workflowsFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.WorkflowsLive, error) { return s.workflowsLive(r.Context()) }, templates.WorkflowsLivePart)
}

// workerRefJSON names a live worker in the JSON API.
type workerRefJSON struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

func workerRefs(ws []store.WorkerHandles) []workerRefJSON {
	out := make([]workerRefJSON, len(ws))
	for i, w := range ws {
		out[i] = workerRefJSON{ID: w.WorkerID, Name: w.Name}
	}
	return out
}

// concurrencyJSON is a task's concurrency limit in the JSON API.
type concurrencyJSON struct {
	Group string `json:"group"`
	Key   string `json:"key"`
	Max   int    `json:"max"`
}

// rateLimitJSON is a task's rate limit in the JSON API.
type rateLimitJSON struct {
	Group string `json:"group"`
	Key   string `json:"key"`
	Limit int    `json:"limit"`
	Per   string `json:"per"`
}

// taskDefJSON is a task of a workflow in the JSON API; durations are Go
// durations ("5m0s").
type taskDefJSON struct {
	Name               string             `json:"name"`
	Deps               []string           `json:"deps"`
	Queue              string             `json:"queue"`
	Priority           *int               `json:"priority"`
	MaxAttempts        int                `json:"max_attempts"`
	InitialDelay       string             `json:"initial_delay"`
	MaxDelay           string             `json:"max_delay"`
	BackoffFactor      float64            `json:"backoff_factor"`
	Jitter             bool               `json:"jitter"`
	RetryFiltered      bool               `json:"retry_filtered"`
	RetryOn            []string           `json:"retry_on"`
	Timeout            string             `json:"timeout"`
	Trigger            engine.TriggerRule `json:"trigger"`
	RequeueOnInterrupt bool               `json:"requeue_on_interrupt"`
	MaxRescues         int                `json:"max_rescues"`
	Concurrency        *concurrencyJSON   `json:"concurrency"`
	RateLimit          *rateLimitJSON     `json:"rate_limit"`
	Handle             string             `json:"handle"`
	Workers            []workerRefJSON    `json:"workers"`
}

// workflowJSON is a workflow in the JSON API: the definition of its
// newest stored version (Version; nil for one this process registers and
// nothing stored), and its versions.
type workflowJSON struct {
	Name     string          `json:"name"`
	Version  *string         `json:"version"`
	Queue    string          `json:"queue"`
	Tasks    []taskDefJSON   `json:"tasks"`
	Workers  []workerRefJSON `json:"workers"`
	RunsURL  string          `json:"runs_url"`
	Versions []versionJSON   `json:"versions"`
}

// versionTaskJSON is a task of a version: its shape.
type versionTaskJSON struct {
	Name string   `json:"name"`
	Deps []string `json:"deps"`
}

// versionRunsJSON counts a version's runs in flight by status, and
// their sum.
type versionRunsJSON struct {
	Pending     int64 `json:"pending"`
	Running     int64 `json:"running"`
	Paused      int64 `json:"paused"`
	Interrupted int64 `json:"interrupted"`
	InFlight    int64 `json:"in_flight"`
}

// versionJSON is a stored version of a workflow and how its deploy
// stands (a row of cairn_workflow_versions).
type versionJSON struct {
	Version      string            `json:"version"`
	Tasks        []versionTaskJSON `json:"tasks"`
	Compatible   []string          `json:"compatible"`
	RegisteredAt time.Time         `json:"registered_at"`
	SeenAt       time.Time         `json:"seen_at"`
	Runs         versionRunsJSON   `json:"runs"`
	Workers      []string          `json:"workers"`
	Newest       bool              `json:"newest"`
	Retirable    bool              `json:"retirable"`
}

func versionAPI(v store.WorkflowVersionState) versionJSON {
	d := decodeDef(v)
	out := versionJSON{
		Version: v.Version, Tasks: make([]versionTaskJSON, len(d.Tasks)), Compatible: nonNil(v.Compatible),
		RegisteredAt: v.RegisteredAt, SeenAt: v.SeenAt, Workers: nonNil(v.WorkerNames),
		Runs:   versionRunsJSON{Pending: v.Pending, Running: v.Running, Paused: v.Paused, Interrupted: v.Interrupted, InFlight: v.InFlight},
		Newest: v.Newest, Retirable: v.Retirable,
	}
	for i, t := range d.Tasks {
		out.Tasks[i] = versionTaskJSON{Name: t.Name, Deps: nonNil(t.Deps)}
	}
	return out
}

func workflowAPI(v workflowView) workflowJSON {
	d := v.def
	out := workflowJSON{Name: d.Name, Queue: d.Queue, Workers: workerRefs(v.any), RunsURL: "/api" + runsHref(d.Name),
		Tasks: []taskDefJSON{}, Versions: make([]versionJSON, len(v.versions))}
	for i, sv := range v.versions {
		out.Versions[i] = versionAPI(sv)
	}
	if len(v.versions) > 0 {
		out.Version = &v.versions[0].Version
	}
	for i, t := range d.Tasks {
		tj := taskDefJSON{
			Name: t.Name, Deps: t.Deps, Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts,
			InitialDelay: t.InitialDelay.String(), MaxDelay: t.MaxDelay.String(), BackoffFactor: t.BackoffFactor,
			Jitter: t.Jitter, RetryFiltered: t.RetryFiltered, RetryOn: nonNil(t.RetryOn), Timeout: t.Timeout.String(),
			Trigger: t.Trigger, RequeueOnInterrupt: t.RequeueOnInterrupt, MaxRescues: t.MaxRescues,
			Handle: t.Handle, Workers: workerRefs(v.workers[i]),
		}
		if c := t.Concurrency; c != nil {
			tj.Concurrency = &concurrencyJSON{Group: c.Group, Key: c.Key, Max: c.Max}
		}
		if r := t.RateLimit; r != nil {
			tj.RateLimit = &rateLimitJSON{Group: r.Group, Key: r.Key, Limit: r.Limit, Per: r.Per.String()}
		}
		out.Tasks = append(out.Tasks, tj)
	}
	return out
}

// apiWorkflow answers GET /api/workflows/{name}: one workflow, as listed.
func (s *Server) apiWorkflow(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	vs, _, err := s.workflowViews(r.Context(), name)
	if err == nil && len(vs) == 0 {
		err = notFound("workflow %q not found: no worker stored it and this process does not register it", name)
	}
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, workflowAPI(vs[0]))
}

func (s *Server) apiWorkflows(w http.ResponseWriter, r *http.Request) {
	vs, _, err := s.workflowViews(r.Context(), "")
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	out := make([]workflowJSON, len(vs))
	names := make([]string, len(vs)) // never null
	for i, v := range vs {
		out[i] = workflowAPI(v)
		names[i] = out[i].Name
	}
	// "workflows" stays the list of names it always was; the
	// descriptions are beside it.
	writeJSON(w, http.StatusOK, map[string]any{"workflows": names, "definitions": out})
}
