package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// Handler runs one attempt of a task. Returning nil completes the task;
// an error retries it per its policy (see Permanent and RetryAfter).
type Handler func(ctx context.Context, t *TaskHandle) error

// Workflow is a named DAG of tasks.
type Workflow struct {
	// Name identifies the workflow; 1-64 of A-Z a-z 0-9 _ . : -.
	Name string
	// Tasks are the nodes, in declaration order (which also orders the
	// merge of dependency outputs).
	Tasks []Task
	// Queue is the default queue of its tasks. Defaults to "default".
	Queue string
}

// Task is one node of a workflow.
type Task struct {
	// Name is unique within the workflow.
	Name string
	// Deps names the tasks that must finish first.
	Deps []string
	// Run is the handler.
	Run Handler
	// Retry is the retry policy; zero fields take the defaults.
	Retry RetryPolicy
	// Timeout bounds one attempt. Defaults to Config.TaskTimeout.
	Timeout time.Duration
	// Trigger decides, once every dependency finished, whether the task
	// runs or is skipped. Defaults to AllSuccess.
	Trigger TriggerRule
	// Queue overrides the workflow's queue for this task.
	Queue string
	// Priority orders claims: lower first. Defaults to the run's priority.
	Priority *int
	// RequeueOnInterrupt sends the task back to ready when its worker shuts
	// down or dies mid-run; otherwise it is parked as interrupted.
	RequeueOnInterrupt bool
	// MaxRescues fails the task after this many rescues from dead workers.
	// Defaults to 3.
	MaxRescues int
	// Concurrency, when set, bounds how many of the group's tasks with the
	// same key value run at once, cluster-wide.
	Concurrency *Concurrency
	// RateLimit, when set, bounds how many of the group's tasks with the
	// same key value start in any window, cluster-wide.
	RateLimit *RateLimit
}

// RetryPolicy says how failed attempts are retried. The delay before
// attempt n+1 is min(InitialDelay * BackoffFactor^(n-1), MaxDelay), with
// ±10% jitter unless NoJitter.
type RetryPolicy struct {
	// MaxAttempts is the attempt budget. Defaults to 3.
	MaxAttempts int
	// InitialDelay is the delay after the first failed attempt. Defaults to 1s.
	InitialDelay time.Duration
	// MaxDelay caps the delay. Defaults to 1h.
	MaxDelay time.Duration
	// BackoffFactor multiplies the delay per attempt. Defaults to 2.
	BackoffFactor float64
	// NoJitter turns the ±10% jitter off.
	NoJitter bool
	// RetryIf, when set, retries only errors it accepts; others fail at once.
	RetryIf func(error) bool
	// RetryOn, when set, retries only errors whose message contains one of
	// these substrings.
	RetryOn []string
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
	p.InitialDelay = cmp.Or(p.InitialDelay, DefaultInitialDelay)
	p.MaxDelay = cmp.Or(p.MaxDelay, DefaultMaxDelay)
	p.BackoffFactor = cmp.Or(p.BackoffFactor, DefaultBackoffFactor)
	return p
}

// Delay returns the backoff before the attempt after failed attempt n
// (n >= 1), without jitter.
func (p RetryPolicy) Delay(n int) time.Duration { return p.outcome().Delay(n) }

// outcome is the policy, its defaults applied, as the retry rule reads it.
func (p RetryPolicy) outcome() outcome.Policy {
	p = p.withDefaults()
	return outcome.Policy{InitialDelay: p.InitialDelay, MaxDelay: p.MaxDelay, BackoffFactor: p.BackoffFactor,
		NoJitter: p.NoJitter, RetryIf: p.RetryIf, RetryOn: p.RetryOn}
}

// workflowDef is a validated, registered workflow.
type workflowDef struct {
	wf        Workflow
	byName    map[string]int
	templates []store.TaskTemplate
	shape     string
	keyed     bool // a task has a concurrency or rate limit
}

func (d *workflowDef) task(idx int) (*Task, bool) {
	if idx < 0 || idx >= len(d.wf.Tasks) {
		return nil, false
	}
	return &d.wf.Tasks[idx], true
}

// compile validates wf and builds its stored templates.
func compile(wf Workflow) (*workflowDef, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidWorkflow, wf.Name, fmt.Sprintf(format, args...))
	}
	if check.Name(wf.Name) != nil {
		return nil, fmt.Errorf("%w: name %q must be 1-64 of A-Z a-z 0-9 _ . : -", ErrInvalidWorkflow, wf.Name)
	}
	if len(wf.Tasks) == 0 {
		return nil, bad("no tasks")
	}
	if len(wf.Tasks) > 1000 {
		return nil, bad("%d tasks; at most 1000", len(wf.Tasks))
	}
	if wf.Queue != "" && check.Name(wf.Queue) != nil {
		return nil, bad("queue %q must be 1-64 of A-Z a-z 0-9 _ . : -", wf.Queue)
	}
	d := &workflowDef{wf: wf, byName: map[string]int{}}
	for i, t := range wf.Tasks {
		if check.Name(t.Name) != nil {
			return nil, bad("task %d: name %q must be 1-64 of A-Z a-z 0-9 _ . : -", i, t.Name)
		}
		if _, dup := d.byName[t.Name]; dup {
			return nil, bad("duplicate task name %q", t.Name)
		}
		if t.Run == nil {
			return nil, bad("task %q has no Run handler", t.Name)
		}
		if t.Queue != "" && check.Name(t.Queue) != nil {
			return nil, bad("task %q: queue %q must be 1-64 of A-Z a-z 0-9 _ . : -", t.Name, t.Queue)
		}
		if t.Timeout < 0 || t.Retry.MaxAttempts < 0 || t.Retry.InitialDelay < 0 || t.Retry.MaxDelay < 0 || t.Retry.BackoffFactor < 0 || t.MaxRescues < 0 {
			return nil, bad("task %q: timeout, retry and rescue settings must not be negative", t.Name)
		}
		if t.Retry.BackoffFactor != 0 && t.Retry.BackoffFactor < 1 {
			return nil, bad("task %q: Retry.BackoffFactor %v must be >= 1", t.Name, t.Retry.BackoffFactor)
		}
		d.byName[t.Name] = i
	}
	deps := make([][]int, len(wf.Tasks))
	dependents := make([][]int, len(wf.Tasks))
	for i, t := range wf.Tasks {
		seen := map[string]bool{}
		for _, dep := range t.Deps {
			j, ok := d.byName[dep]
			if !ok {
				return nil, bad("task %q depends on unknown task %q", t.Name, dep)
			}
			if seen[dep] {
				return nil, bad("task %q lists dependency %q twice", t.Name, dep)
			}
			seen[dep] = true
			deps[i] = append(deps[i], j)
			dependents[j] = append(dependents[j], i)
		}
	}
	if cycle := findCycle(wf, deps); cycle != "" {
		return nil, bad("cycle %s", cycle)
	}
	for i, t := range wf.Tasks {
		rule, err := compileTrigger(t, d.byName)
		if err != nil {
			return nil, bad("task %q: %v", t.Name, err)
		}
		rp := t.Retry.withDefaults()
		conc, rate, err := flowTemplates(wf.Name, t)
		if err != nil {
			return nil, err
		}
		d.keyed = d.keyed || conc != nil || rate != nil
		d.templates = append(d.templates, store.TaskTemplate{
			Idx: i, Name: t.Name, Queue: t.Queue, Priority: t.Priority,
			Deps: nonNil(deps[i]), Dependents: nonNil(dependents[i]),
			MaxAttempts: rp.MaxAttempts, TriggerRule: rule,
			RequeueOnInterrupt: t.RequeueOnInterrupt, MaxRescues: cmp.Or(t.MaxRescues, DefaultMaxRescues),
			Concurrency: conc, RateLimit: rate,
		})
	}
	shape, _ := json.Marshal(struct {
		Queue string
		Tasks []store.TaskTemplate
	}{wf.Queue, d.templates})
	d.shape = string(shape)
	return d, nil
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// findCycle returns a cycle as "a -> b -> a", or "".
func findCycle(wf Workflow, deps [][]int) string {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]int, len(deps))
	var path []int
	var visit func(i int) string
	visit = func(i int) string {
		state[i] = onPath
		path = append(path, i)
		for _, j := range deps[i] {
			switch state[j] {
			case onPath:
				cyc := slices.Clone(path[slices.Index(path, j):])
				// Print in dependency direction (a -> b: b depends on a),
				// starting at the earliest declared task.
				slices.Reverse(cyc)
				first := slices.Index(cyc, slices.Min(cyc))
				cyc = append(cyc[first:], cyc[:first]...)
				names := make([]string, 0, len(cyc)+1)
				for _, k := range append(cyc, cyc[0]) {
					names = append(names, wf.Tasks[k].Name)
				}
				return strings.Join(names, " -> ")
			case unseen:
				if c := visit(j); c != "" {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = done
		return ""
	}
	for i := range deps {
		if state[i] == unseen {
			if c := visit(i); c != "" {
				return c
			}
		}
	}
	return ""
}
