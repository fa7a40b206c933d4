package engine

import (
	"cmp"
	"slices"
	"time"
)

// WorkflowDef describes a registered workflow as it runs: its tasks with
// every default applied. It is a copy; changing it changes nothing.
type WorkflowDef struct {
	Name string
	// Queue is the queue of its tasks that name none (a run can move
	// those with WithQueue).
	Queue string
	Tasks []TaskDef
}

// TaskDef describes one task of a registered workflow, defaults applied.
type TaskDef struct {
	Name string
	// Deps are the names of the tasks it waits for, in declaration order.
	Deps []string
	// Queue is the queue its tasks go to.
	Queue string
	// Priority is the task's own priority; nil takes the run's.
	Priority *int
	// MaxAttempts, InitialDelay, MaxDelay, BackoffFactor and Jitter are
	// the retry policy.
	MaxAttempts   int
	InitialDelay  time.Duration
	MaxDelay      time.Duration
	BackoffFactor float64
	Jitter        bool
	// RetryFiltered is true when the policy retries only some errors
	// (RetryIf or RetryOn); RetryOn lists the message patterns.
	RetryFiltered bool
	RetryOn       []string
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Trigger is the trigger rule (AllSuccess when the task set none).
	Trigger            TriggerRule
	RequeueOnInterrupt bool
	MaxRescues         int
	// Concurrency and RateLimit are the flow controls, nil when unset;
	// their Group is the effective one ("workflow.task" by default).
	Concurrency *Concurrency
	RateLimit   *RateLimit
	// Handle is the "workflow.task" name workers register to run it.
	Handle string
}

// WorkflowDefs describes the workflows this engine registered, sorted by
// name.
func (e *Engine) WorkflowDefs() []WorkflowDef {
	e.wfMu.RLock()
	defs := make([]*workflowDef, 0, len(e.workflows))
	for _, d := range e.workflows {
		defs = append(defs, d)
	}
	e.wfMu.RUnlock()
	slices.SortFunc(defs, func(a, b *workflowDef) int { return cmp.Compare(a.wf.Name, b.wf.Name) })
	out := make([]WorkflowDef, len(defs))
	for i, d := range defs {
		out[i] = e.describe(d)
	}
	return out
}

// describe copies a registered workflow into a WorkflowDef.
func (e *Engine) describe(d *workflowDef) WorkflowDef {
	wf := d.wf
	out := WorkflowDef{Name: wf.Name, Queue: cmp.Or(wf.Queue, DefaultQueue), Tasks: make([]TaskDef, len(wf.Tasks))}
	for i, t := range wf.Tasks {
		rp := t.Retry.withDefaults()
		td := TaskDef{
			Name: t.Name, Deps: append([]string{}, t.Deps...), Queue: cmp.Or(t.Queue, out.Queue),
			MaxAttempts: rp.MaxAttempts, InitialDelay: rp.InitialDelay, MaxDelay: rp.MaxDelay,
			BackoffFactor: rp.BackoffFactor, Jitter: !rp.NoJitter,
			RetryFiltered: rp.RetryIf != nil || len(rp.RetryOn) > 0, RetryOn: slices.Clone(rp.RetryOn),
			Timeout: cmp.Or(t.Timeout, e.cfg.TaskTimeout), Trigger: t.Trigger,
			RequeueOnInterrupt: t.RequeueOnInterrupt, MaxRescues: cmp.Or(t.MaxRescues, DefaultMaxRescues),
			Handle: wf.Name + "." + t.Name,
		}
		if t.Priority != nil {
			p := *t.Priority
			td.Priority = &p
		}
		if td.Trigger.Shorthand == "" && td.Trigger.Mode == "" {
			td.Trigger = AllSuccess
		} else {
			td.Trigger.Conditions = slices.Clone(td.Trigger.Conditions)
		}
		if c := t.Concurrency; c != nil {
			cc := *c
			cc.Group = cmp.Or(cc.Group, td.Handle)
			td.Concurrency = &cc
		}
		if r := t.RateLimit; r != nil {
			rc := *r
			rc.Group = cmp.Or(rc.Group, td.Handle)
			td.RateLimit = &rc
		}
		out.Tasks[i] = td
	}
	return out
}
