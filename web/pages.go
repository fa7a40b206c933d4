package web

import (
	"context"
	"errors"
	"github.com/a-h/templ"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// Limits of the detail pages.
const (
	runEventsShown = 300
	// childRunsShown is how many child runs a run page lists.
	childRunsShown = 100
	workersShown   = 200
	nextFiresShown = 5
	// flowHoldsShown caps the flow keys holding work back shown per queue.
	flowHoldsShown = 20
)

// pathID reads a positive integer id from the path.
func pathID(r *http.Request, what string) (int64, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("bad %s id %q: must be a positive integer", what, raw)
	}
	return id, nil
}

// overview reads (through the cache) what the overview shows.
func (s *Server) overview(ctx context.Context) (templates.Overview, error) {
	var o templates.Overview
	if err := s.cache.warm(ctx); err != nil {
		return o, err
	}
	counts, err := s.cache.taskCounts(ctx)
	if err != nil {
		return o, err
	}
	buckets, err := s.cache.throughputHour(ctx)
	if err != nil {
		return o, err
	}
	workers, err := s.cache.liveWorkers(ctx)
	if err != nil {
		return o, err
	}
	queues, err := s.cache.queueDepth(ctx)
	if err != nil {
		return o, err
	}
	states, total := stateCounts(counts)
	for _, c := range states {
		o.States = append(o.States, templates.StateCount{State: c.Status, Count: c.Tasks})
	}
	o.Total = total
	o.Chart = throughputChart(buckets)
	if len(workers) > overviewWorkers {
		workers, o.MoreWorkers = workers[:overviewWorkers], true
	}
	for _, w := range workers {
		o.Workers = append(o.Workers, workerRow(w))
	}
	now := s.clock()
	for _, q := range queues {
		o.Queues = append(o.Queues, queueRow(q, now))
	}
	bd, err := s.breakdowns(ctx)
	if err != nil {
		return o, err
	}
	o.Attention, o.Workflows, o.QueueBreakdown = attentionViews(bd.Attention), breakdownViews(bd.Workflows), breakdownViews(bd.Queues)
	return o, nil
}

// serveView builds a view model and renders it with comp, or maps the
// error: every page and live fragment handler has this shape.
func serveView[V any](s *Server, w http.ResponseWriter, r *http.Request, build func() (V, error), comp func(V) templ.Component) {
	v, err := build()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, comp(v))
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.OverviewView, error) {
		o, err := s.overview(r.Context())
		return templates.OverviewView{Page: s.page(w, r, "Overview", "overview"), Overview: o}, err
	}, templates.OverviewPage)
}

func (s *Server) overviewFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.Overview, error) { return s.overview(r.Context()) }, templates.OverviewLive)
}

// runsList reads the runs page's filter and list from the request.
func (s *Server) runsList(r *http.Request) (templates.RunFilter, templates.RunsList, error) {
	q := r.URL.Query()
	f := runFilterFrom(q)
	p, err := runParams(f)
	if err != nil {
		return f, templates.RunsList{}, err
	}
	if err := pageParams(q, &p, pageSize); err != nil {
		return f, templates.RunsList{}, err
	}
	rp, err := s.listRuns(r.Context(), p)
	if err != nil {
		return f, templates.RunsList{}, err
	}
	l := rp.view(f, p.Limit, p.After != nil || p.Before != nil)
	l.Selectable = sessionFrom(r.Context()).canWrite()
	return f, l, nil
}

// runsPage shows the runs list. A bad filter shows the page with the
// form as sent and the error beside the field at fault (status 400).
func (s *Server) runsPage(w http.ResponseWriter, r *http.Request) {
	v, err := s.runsView(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if v.FilterError.Message != "" {
		status = http.StatusBadRequest
	}
	s.render(w, r, status, templates.RunsPage(v))
}

// runsView builds the runs page of the request's filter; a bad filter
// is not an error but the view's FilterError.
func (s *Server) runsView(w http.ResponseWriter, r *http.Request) (templates.RunsView, error) {
	f, list, err := s.runsList(r)
	var filterErr templates.FieldError
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) || he.status != http.StatusBadRequest {
			return templates.RunsView{}, err
		}
		filterErr = templates.FieldError{Field: he.field, Message: he.msg}
	}
	wfs, err := s.workflowNames(r.Context())
	if err != nil {
		return templates.RunsView{}, err
	}
	v := templates.RunsView{
		Page: s.page(w, r, "Runs", "runs"), Filter: f, FilterError: filterErr, Statuses: runStatuses,
		Workflows: wfs, Query: r.URL.RawQuery, List: list, Start: templates.StartForm{Workflows: wfs},
	}
	if f.Workflow != "" && !slices.Contains(wfs, f.Workflow) {
		v.Workflows = append(slices.Clone(wfs), f.Workflow) // runs of a workflow nobody registers now
	}
	if v.CanWrite && filterErr.Message == "" {
		if err := s.countMatching(r.Context(), f, &v); err != nil {
			return templates.RunsView{}, err
		}
	}
	return v, nil
}

// countMatching counts the runs matching the filter for "select all
// matching", up to BulkLimit.
func (s *Server) countMatching(ctx context.Context, f templates.RunFilter, v *templates.RunsView) error {
	p, err := runParams(f)
	if err != nil {
		return err
	}
	n, err := s.reads(ctx).RunCountFiltered(ctx, &p, BulkLimit+1)
	if err != nil {
		return err
	}
	v.Matching, v.MatchingMore, v.BulkLimit = min(n, BulkLimit), n > BulkLimit, BulkLimit
	return nil
}

func (s *Server) runsFragment(w http.ResponseWriter, r *http.Request) {
	_, list, err := s.runsList(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, templates.RunsLive(list))
}

// runLive reads the live part of a run page.
func (s *Server) runLive(r *http.Request) (*store.Run, templates.RunLive, error) {
	id, err := pathID(r, "run")
	if err != nil {
		return nil, templates.RunLive{}, err
	}
	ctx := r.Context()
	var run *store.Run
	var tasks []store.Task
	var evs []store.Event
	var parent *store.RunParent
	var children []store.ChildRun
	var after []store.RunDep
	var progress map[int64]store.ChildProgress
	var trs map[int64][]store.Transition
	err = s.snapshotFresh(ctx, func(st Reads) error {
		if run, err = st.RunGet(ctx, id); err != nil {
			return notFoundAs(err, "run %d not found", id)
		}
		if tasks, err = st.TaskListByRun(ctx, id); err != nil {
			return err
		}
		if after, err = st.RunDepList(ctx, id); err != nil {
			return err
		}
		if evs, err = st.EventListByRunRecent(ctx, id, runEventsShown); err != nil {
			return err
		}
		if trs, err = st.RunTransitionList(ctx, id); err != nil {
			return err
		}
		if run.ParentTaskID != nil {
			// ErrNotFound: its parent's run was pruned; nothing to link.
			if parent, err = st.RunParentGet(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if progress, err = st.RunChildProgressList(ctx, id); err != nil {
			return err
		}
		children, err = st.RunChildList(ctx, id, childRunsShown+1)
		return err
	})
	if err != nil {
		return nil, templates.RunLive{}, err
	}
	names := make(map[int64]string, len(tasks))
	rows := make([]templates.TaskRow, len(tasks))
	for i, t := range tasks {
		names[t.ID] = t.Name
		rows[i] = taskRow(t)
	}
	sess := sessionFrom(ctx)
	live := templates.RunLive{
		CSRF: s.csrfFor(r), CanWrite: sess.canWrite(), Run: runInfo(run), DAG: layoutDAG(tasks), Tasks: rows,
		Events: eventRows(evs, names), EventsCut: len(evs) >= runEventsShown,
	}
	runTimes(&live, run, tasks, trs, s.clock())
	for i, n := range live.DAG.Nodes {
		if p, ok := progress[n.TaskID]; ok {
			live.DAG.Nodes[i].Children = &templates.DAGChildren{Done: p.Done, Total: p.Total}
		}
	}
	for _, d := range after {
		live.After = append(live.After, templates.RunAfter{ID: d.AfterRunID, Status: d.Status, Finished: d.Finished})
	}
	if parent != nil {
		live.Parent = &templates.RunParent{RunID: parent.RunID, TaskID: parent.TaskID, TaskName: parent.TaskName}
	}
	if len(children) > childRunsShown {
		children, live.ChildrenCut = children[:childRunsShown], true
	}
	for _, c := range children {
		live.Children = append(live.Children, templates.ChildRunRow{ID: c.ID, Workflow: c.Workflow, Status: c.Status, Task: c.ParentTask})
	}
	return run, live, nil
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request) {
	run, live, err := s.runLive(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, templates.RunPage(templates.RunView{
		Page: s.page(w, r, "Run #"+strconv.FormatInt(run.ID, 10), "runs"), Input: prettyJSON(run.Input), Live: live}))
}

func (s *Server) runFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.RunLive, error) {
		_, live, err := s.runLive(r)
		return live, err
	}, templates.RunLivePart)
}

// taskDetail is everything the task page and the task API show.
type taskDetail struct {
	task     *store.Task
	run      *store.Run
	deps     []store.Task
	attempts []store.TaskAttempt
	events   []store.Event
	// wait says why a ready task is not running yet; nil otherwise.
	wait *store.TaskWait
	// steps are its most recent journaled steps; pending and consumed its
	// signals (see stepsShown, signalsShown).
	steps             []store.StepInfo
	pending, consumed []store.SignalInfo
	// children counts its child runs while it waits for runs; nil
	// otherwise.
	children *store.ChildProgress
}

func (s *Server) taskDetail(ctx context.Context, id int64) (*taskDetail, error) {
	d := &taskDetail{}
	err := s.snapshotFresh(ctx, func(st Reads) error {
		var err error
		if d.task, err = st.TaskGet(ctx, id); err != nil {
			return notFoundAs(err, "task %d not found", id)
		}
		if d.run, err = st.RunGet(ctx, d.task.RunID); err != nil {
			return notFoundAs(err, "run %d of task %d not found", d.task.RunID, id)
		}
		if d.deps, err = st.TaskDepList(ctx, id); err != nil {
			return err
		}
		if d.attempts, err = st.TaskAttemptList(ctx, id); err != nil {
			return err
		}
		if d.events, err = st.EventListByTask(ctx, id); err != nil {
			return err
		}
		if d.steps, err = st.TaskStepRecent(ctx, id, stepsShown); err != nil {
			return err
		}
		if d.pending, err = st.TaskSignalList(ctx, &store.TaskSignalListParams{TaskID: id, Limit: signalsShown}); err != nil {
			return err
		}
		if d.consumed, err = st.TaskSignalList(ctx, &store.TaskSignalListParams{TaskID: id, Consumed: true, Limit: signalsShown}); err != nil {
			return err
		}
		if d.task.Status == store.StatusDeferred && deref(d.task.WaitKind) == store.WaitKindRuns {
			c, err := st.TaskChildProgress(ctx, id)
			if err != nil {
				return err
			}
			d.children = &c
		}
		if d.task.Status == store.StatusReady {
			d.wait, err = st.TaskWaitGet(ctx, id)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Server) taskLive(r *http.Request, d *taskDetail) templates.TaskLive {
	deps := make([]templates.DepRow, len(d.deps))
	for i, dep := range d.deps {
		deps[i] = templates.DepRow{ID: dep.ID, Name: dep.Name, Status: dep.Status}
	}
	sess := sessionFrom(r.Context())
	info := taskInfo(d.task)
	if d.wait != nil {
		info.Waiting, info.WaitReason = d.wait.Detail, string(d.wait.Reason)
	}
	live := templates.TaskLive{
		CSRF: s.csrfFor(r), CanWrite: sess.canWrite(), Task: info, Deps: deps,
		Attempts: attemptRows(d.attempts, d.task), Checkpoint: prettyJSON(d.task.Checkpoint),
		Output: prettyJSON(d.task.Output), Context: prettyJSON(taskContext(d.run.Input, d.deps)),
		Events: eventRows(d.events, nil), Wait: s.durableWaitRow(d), Condition: s.conditionRow(d.task),
		Steps: stepRows(d.steps), StepsMore: more(d.steps, func(s store.StepInfo) int64 { return s.Total }),
		Pending: signalRows(d.pending), PendingMore: more(d.pending, func(s store.SignalInfo) int64 { return s.Total }),
		Consumed: signalRows(d.consumed), ConsumedMore: more(d.consumed, func(s store.SignalInfo) int64 { return s.Total }),
	}
	taskTimes(&live, d.task, d.events, s.clock())
	return live
}

// durableWaitRow says the durable wait of the task in words; nil when
// it is in none.
func (s *Server) durableWaitRow(d *taskDetail) *templates.DurableWait {
	w := durableWait(d.task, d.children, s.clock())
	if w == nil {
		return nil
	}
	out := &templates.DurableWait{Kind: w.Kind, Text: w.Text}
	if w.Since != nil {
		out.Since = fmtTime(*w.Since) + " UTC"
	}
	return out
}

// renderTaskPage renders the task page with its Send signal form f.
func (s *Server) renderTaskPage(w http.ResponseWriter, r *http.Request, status int, d *taskDetail, f templates.SignalForm) {
	id := d.task.ID
	f.Action = "/tasks/" + strconv.FormatInt(id, 10) + "/signal"
	log, err := s.taskLog(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var rerun *templates.RerunForm
	if store.RunIsFinished(d.run.Status) {
		rerun = &templates.RerunForm{Action: "/tasks/" + strconv.FormatInt(id, 10) + "/rerun", Input: prettyJSON(d.run.Input)}
	}
	s.render(w, r, status, templates.TaskPage(templates.TaskView{
		Page:  s.page(w, r, "Task "+d.task.Name+" #"+strconv.FormatInt(id, 10), "runs"),
		Input: prettyJSON(d.run.Input), Live: s.taskLive(r, d), Signal: f, Rerun: rerun, Log: log,
	}))
}

func (s *Server) taskPage(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.taskDetail(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.renderTaskPage(w, r, http.StatusOK, d, templates.SignalForm{})
}

func (s *Server) taskFragment(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.taskDetail(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, templates.TaskLivePart(s.taskLive(r, d)))
}

func (s *Server) workersView(w http.ResponseWriter, r *http.Request) (templates.WorkersView, error) {
	ws, err := s.reads(r.Context()).WorkerSlotList(r.Context(), workersShown)
	if err != nil {
		return templates.WorkersView{}, err
	}
	v := templates.WorkersView{Page: s.page(w, r, "Workers", "workers"), Limit: workersShown}
	for _, wk := range ws {
		v.Workers = append(v.Workers, workerRow(wk))
	}
	return v, nil
}

func (s *Server) workersPage(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.WorkersView, error) { return s.workersView(w, r) }, templates.WorkersPage)
}

func (s *Server) workersFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.WorkersView, error) { return s.workersView(nil, r) }, templates.WorkersLive)
}

func (s *Server) queuesView(w http.ResponseWriter, r *http.Request) (templates.QueuesView, error) {
	// The queues' own rows are read fresh (an action redirects here);
	// the breakdown's through the cache, all at once.
	var qs []store.QueueDepth
	var un []store.Unroutable
	var holds map[string][]store.FlowHold
	var held map[string]int64
	err := together(r.Context(),
		func(ctx context.Context) (err error) { qs, err = s.reads(ctx).QueueDepthList(ctx); return err },
		func(ctx context.Context) (err error) { un, err = s.reads(ctx).UnroutableList(ctx); return err },
		func(ctx context.Context) (err error) {
			holds, held, err = s.reads(ctx).FlowHoldList(ctx, flowHoldsShown)
			return err
		},
		func(ctx context.Context) error { _, err := s.cache.taskBreakdown(ctx); return err },
		func(ctx context.Context) error { _, err := s.cache.taskCounts(ctx); return err },
		func(ctx context.Context) error { _, err := s.cache.liveWorkers(ctx); return err })
	if err != nil {
		return templates.QueuesView{}, err
	}
	byQueue := unroutableByQueue(un)
	v := templates.QueuesView{Page: s.page(w, r, "Queues", "queues")}
	now := s.clock()
	for _, q := range qs {
		row := queueRow(q, now)
		for _, u := range byQueue[q.Queue] {
			row.Unroutable = append(row.Unroutable, templates.UnroutableRow{Task: u.Workflow + "." + u.Task, Ready: u.Ready})
		}
		row.Holds = flowHoldRows(holds[q.Queue])
		row.HoldsMore = held[q.Queue] - int64(len(row.Holds))
		v.Queues = append(v.Queues, row)
	}
	bd, err := s.breakdownsOf(r.Context(), qs, un)
	if err != nil {
		return templates.QueuesView{}, err
	}
	for _, a := range bd.Attention {
		if a.Kind != "heartbeat" {
			v.Attention = append(v.Attention, attentionViews([]attentionJSON{a})...)
		}
	}
	v.Breakdown = breakdownViews(bd.Queues)
	return v, nil
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.QueuesView, error) { return s.queuesView(w, r) }, templates.QueuesPage)
}

func (s *Server) queuesFragment(w http.ResponseWriter, r *http.Request) {
	serveView(s, w, r, func() (templates.QueuesView, error) { return s.queuesView(nil, r) }, templates.QueuesLive)
}

// nextFires returns the next fires of a schedule: from its stored next
// fire when active, from now when paused (resuming recomputes it).
func nextFires(sc store.Schedule, now time.Time, n int) ([]time.Time, error) {
	if sc.Paused {
		return engine.NextFires(sc.Expression, sc.Timezone, now, n)
	}
	rest, err := engine.NextFires(sc.Expression, sc.Timezone, sc.NextFireAt, n-1)
	if err != nil {
		return nil, err
	}
	loc, lerr := time.LoadLocation(sc.Timezone)
	if lerr != nil {
		loc = time.UTC
	}
	return append([]time.Time{sc.NextFireAt.In(loc)}, rest...), nil
}

func (s *Server) schedulesPage(w http.ResponseWriter, r *http.Request) {
	scs, err := s.reads(r.Context()).ScheduleList(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := templates.SchedulesView{Page: s.page(w, r, "Schedules", "schedules")}
	now := s.clock()
	for _, sc := range scs {
		row := templates.ScheduleRow{
			Name: sc.Name, Expression: sc.Expression, Timezone: sc.Timezone, Workflow: sc.Workflow,
			Input: shortJSON(sc.Input, previewJSON), Paused: sc.Paused, CatchUp: sc.CatchUp,
			NextFire: fmtTime(sc.NextFireAt), LastFire: fmtTimePtr(sc.LastFireAt), LastRunID: deref(sc.LastRunID),
		}
		fires, err := nextFires(sc, now, nextFiresShown)
		if err != nil {
			row.Error = err.Error()
		}
		for _, f := range fires {
			row.NextFires = append(row.NextFires, f.Format("2006-01-02 15:04 MST"))
		}
		v.Schedules = append(v.Schedules, row)
	}
	s.render(w, r, http.StatusOK, templates.SchedulesPage(v))
}
