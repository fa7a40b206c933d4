package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// The JSON API offers what the pages and actions do. Lists are wrapped in
// an object so fields can be added; times are RFC 3339; errors are
// {"error": "..."} with a 4xx status for a caller's mistake.

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	counts, err := s.cache.taskCounts(ctx)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	buckets, err := s.cache.throughputHour(ctx)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	states, total := stateCounts(counts)
	byState := make(map[string]int64, len(states))
	for _, c := range states {
		byState[c.Status] = c.Tasks
	}
	bd, err := s.breakdowns(ctx)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"tasks_by_state": byState, "tasks_total": total, "task_counts": nonNil(counts), "throughput_per_minute": buckets,
		"workflows": bd.Workflows, "queues": bd.Queues, "attention": bd.Attention,
	})
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := runParams(runFilterFrom(q))
	if err == nil {
		err = pageParams(q, &p, pageSize)
	}
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	rp, err := s.listRuns(r.Context(), p)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	out := map[string]any{"runs": nonNil(rp.rows)}
	if rp.next != "" {
		out["next_cursor"] = rp.next
	}
	if rp.prev != "" {
		out["prev_cursor"] = rp.prev
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiEnqueue(w http.ResponseWriter, r *http.Request) {
	var req enqueueRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.apiFail(w, r, err)
		return
	}
	run, err := s.enqueue(r.Context(), req)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	status := http.StatusCreated
	if run.Existing {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"id": run.ID, "workflow": run.Workflow, "existing": run.Existing})
}

// bulkRequest is the body of POST /api/runs/bulk: an action and its
// selection, which must be explicit: the runs' ids, a filter that sets a
// field, or All.
type bulkRequest struct {
	Action string `json:"action"`
	// IDs are the runs to act on (at most BulkLimit).
	IDs    []int64 `json:"ids"`
	Filter *struct {
		Workflow string `json:"workflow"`
		Status   string `json:"status"`
		From     string `json:"from"`
		To       string `json:"to"`
		Q        string `json:"q"`
	} `json:"filter"`
	// All selects every run the action applies to (the newest
	// BulkLimit), or with Filter every one it matches.
	All bool `json:"all"`
	// DryRun reports what the action would touch without acting.
	DryRun bool `json:"dry_run"`
}

func (s *Server) apiBulk(w http.ResponseWriter, r *http.Request) {
	var req bulkRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.apiFail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bulkTimeout)
	defer cancel()
	out := map[string]any{"action": req.Action, "dry_run": req.DryRun}
	var runs []int64
	planned := 0 // retry: interrupted runs of the filter left alone
	switch {
	case req.IDs != nil && req.Filter != nil:
		s.apiFail(w, r, fieldError("ids", "give ids or filter, not both"))
		return
	case req.IDs != nil && req.All:
		s.apiFail(w, r, fieldError("ids", "give ids or all, not both"))
		return
	case req.IDs != nil:
		if !slices.Contains(bulkActions, req.Action) {
			s.apiFail(w, r, badAction(req.Action))
			return
		}
		if len(req.IDs) == 0 {
			s.apiFail(w, r, fieldError("ids", "ids: empty; name at least one run"))
			return
		}
		if len(req.IDs) > BulkLimit {
			s.apiFail(w, r, fieldError("ids", "ids: %d runs; at most %d at a time", len(req.IDs), BulkLimit))
			return
		}
		for i, id := range req.IDs {
			if id <= 0 {
				s.apiFail(w, r, fieldError("ids", "ids[%d]: run id %d must be positive", i, id))
				return
			}
		}
		runs = req.IDs
		out["runs"] = len(runs)
	default:
		if !slices.Contains(bulkActions, req.Action) {
			s.apiFail(w, r, badAction(req.Action))
			return
		}
		f := runFilterFrom(nil)
		if req.Filter != nil {
			f.Workflow, f.Status, f.From, f.To, f.Q = req.Filter.Workflow, req.Filter.Status, req.Filter.From, req.Filter.To, req.Filter.Q
		}
		if !req.All && !filterSet(f) {
			choices := `"ids", a "filter", or "all": true`
			if req.Filter != nil {
				choices += ` (the "filter" given sets no field)`
			}
			s.apiFail(w, r, noSelection(req.Action, choices))
			return
		}
		plan, err := s.planBulk(ctx, req.Action, f)
		if err != nil {
			s.apiFail(w, r, err)
			return
		}
		runs, planned = plan.runs, plan.interrupted
		out["runs"], out["tasks"], out["capped"] = len(plan.runs), len(plan.tasks), plan.capped
		if req.Action == "retry" {
			out["interrupted"] = plan.interrupted
		}
		if note := retryNote(plan.interrupted); req.DryRun && note != "" {
			out["message"] = note
		}
	}
	if !req.DryRun {
		res, err := s.applyBulk(ctx, req.Action, runs)
		s.logBulk(ctx, req.Action, len(runs), res, err)
		if err != nil {
			s.apiFail(w, r, err)
			return
		}
		out["done"], out["skipped"] = len(res.Done), len(res.Skipped)
		out["done_ids"], out["skipped_ids"] = nonNil(res.Done), nonNil(res.Skipped)
		out["message"] = bulkMessage(req.Action, res, s.skippedNote(ctx, req.Action, res, planned))
	}
	writeJSON(w, http.StatusOK, out)
}

// signalRequest is the body of POST /api/tasks/{id}/signal.
type signalRequest struct {
	Name    *string         `json:"name"`
	Payload json.RawMessage `json:"payload"`
}

// apiSignal sends a signal with a payload to a task (Engine.SendSignal):
// 200 once it is stored, 404 for an unknown task, 409 for a finished
// one, 400 naming the field for a bad name or payload.
func (s *Server) apiSignal(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	var req signalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.apiFail(w, r, err)
		return
	}
	if err := checkSignal(req.Name, nil); err != nil {
		s.apiFail(w, r, err)
		return
	}
	payload := req.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if err := s.eng.SendSignal(r.Context(), id, *req.Name, payload); err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "message": "Signal " + strconv.Quote(*req.Name) + " sent to task #" + strconv.FormatInt(id, 10) + "."})
}

// MaxRunWait is the longest wait GET /api/runs/{id}?wait= takes; a
// client waits longer by asking again.
const MaxRunWait = time.Minute

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "run")
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	ctx := r.Context()
	if v := r.URL.Query().Get("wait"); v != "" {
		if err := s.waitRun(ctx, id, v); err != nil {
			s.apiFail(w, r, err)
			return
		}
	}
	var (
		run   *store.Run
		tasks []store.Task
		after []store.RunDep
	)
	err = s.snapshotFresh(ctx, func(st Reads) error {
		if run, err = st.RunGet(ctx, id); err != nil {
			return notFoundAs(err, "run %d not found", id)
		}
		if tasks, err = st.TaskListByRun(ctx, id); err != nil {
			return err
		}
		after, err = st.RunDepList(ctx, id)
		return err
	})
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": run, "tasks": nonNil(tasks), "after": nonNil(after)})
}

// waitRun waits, for at most the duration wait (?wait=), until run id has
// ended (Engine.WaitRun); a wait that runs out is no error: the run is
// answered as it is.
func (s *Server) waitRun(ctx context.Context, id int64, wait string) error {
	d, err := time.ParseDuration(wait)
	if err != nil || d < 0 || d > MaxRunWait {
		return fieldError("wait", "wait must be a duration from 0s to %s, e.g. wait=30s, not %q", MaxRunWait, wait)
	}
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err = s.eng.WaitRun(waitCtx, id)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return notFound("run %d not found", id)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil // the wait ran out: the run is answered as it is
	}
	return err
}

func (s *Server) apiTask(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "task")
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	d, err := s.taskDetail(r.Context(), id)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"task": d.task, "attempts": nonNil(d.attempts), "events": nonNil(d.events),
		"context": taskContext(d.run.Input, d.deps), "flow": taskFlow(d.task), "wait": d.wait,
		"durable_wait": durableWait(d.task, d.children, s.clock()),
		"condition":    s.condition(d.task),
		"steps":        stepsJSON(d.steps), "steps_total": total(d.steps, func(s store.StepInfo) int64 { return s.Total }),
		"signals_pending": nonNil(d.pending), "signals_pending_total": total(d.pending, func(s store.SignalInfo) int64 { return s.Total }),
		"signals_consumed": nonNil(d.consumed), "signals_consumed_total": total(d.consumed, func(s store.SignalInfo) int64 { return s.Total }),
	})
}

func (s *Server) apiWorkers(w http.ResponseWriter, r *http.Request) {
	limit := workersShown
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 10000 {
			s.apiFail(w, r, badRequest("limit %q: must be 1 to 10000", l))
			return
		}
		limit = n
	}
	ws, err := s.reads(r.Context()).WorkerSlotList(r.Context(), limit)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": nonNil(ws)})
}

// queueJSON is a queue with its depth, the ready tasks no live worker
// can run (routing) and the flow keys that hold its ready tasks back
// (up to flowHoldsShown, most ready first; FlowHoldsTotal counts them
// all).
type queueJSON struct {
	store.QueueDepth
	Unroutable     []store.Unroutable `json:"unroutable"`
	FlowHolds      []store.FlowHold   `json:"flow_holds"`
	FlowHoldsTotal int64              `json:"flow_holds_total"`
}

func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.reads(r.Context()).QueueDepthList(r.Context())
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	un, err := s.reads(r.Context()).UnroutableList(r.Context())
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	holds, held, err := s.reads(r.Context()).FlowHoldList(r.Context(), flowHoldsShown)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	byQueue := unroutableByQueue(un)
	out := make([]queueJSON, len(qs))
	for i, q := range qs {
		out[i] = queueJSON{QueueDepth: q, Unroutable: nonNil(byQueue[q.Queue]), FlowHolds: nonNil(holds[q.Queue]), FlowHoldsTotal: held[q.Queue]}
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// scheduleJSON is a schedule with its next fires.
type scheduleJSON struct {
	store.Schedule
	NextFires []time.Time `json:"next_fires"`
	Error     string      `json:"next_fires_error,omitempty"`
}

func (s *Server) apiSchedules(w http.ResponseWriter, r *http.Request) {
	scs, err := s.reads(r.Context()).ScheduleList(r.Context())
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	now := s.clock()
	out := make([]scheduleJSON, len(scs))
	for i, sc := range scs {
		out[i].Schedule = sc
		fires, err := nextFires(sc, now, nextFiresShown)
		if err != nil {
			out[i].Error = err.Error()
		}
		out[i].NextFires = nonNil(fires)
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}

// nonNil makes nil slices encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
