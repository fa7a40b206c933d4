// Package define turns what callers declare into what the store writes,
// checking it on the way: a workflow into its task templates (names,
// dependencies, cycles, trigger rules, flow controls, its shape), and one
// run to enqueue into its insert parameters (input, options, flow keys).
//
// It works on neutral inputs (the engine converts its public types) and
// wraps the engine's error values, given in Rules, so that callers match
// them with errors.Is. It imports nothing of the engine.
package define

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
	"github.com/cairnhq/cairn/store/rule"
)

// Rules are the engine's error values the checks wrap, and its limits.
type Rules struct {
	// ErrInvalidWorkflow wraps a definition's errors.
	ErrInvalidWorkflow error
	// ErrInvalidInput wraps a run's errors.
	ErrInvalidInput error
	// ErrUnknownWorkflow is the error of a run of an unregistered workflow.
	ErrUnknownWorkflow error
	// ErrInputTooLarge is the error of an input over MaxInputBytes.
	ErrInputTooLarge error
	// ErrNotFound and ErrInvalidState are the errors of an action on a
	// run that does not exist, or whose state refuses it (a rerun).
	ErrNotFound, ErrInvalidState error
	// MaxInputBytes bounds a run's input.
	MaxInputBytes int
	// DefaultQueue is the queue of a run whose workflow and options name
	// none.
	DefaultQueue string
}

// Workflow is a workflow as declared, defaults applied to its tasks'
// retry and rescue settings (negative values kept, to be refused).
type Workflow struct {
	Name  string
	Queue string
	Tasks []Task
}

// Task is one task as declared.
type Task struct {
	Name string
	Deps []string
	// HasRun is false when the task has no handler.
	HasRun             bool
	Queue              string
	Priority           *int
	Timeout            time.Duration
	MaxAttempts        int
	InitialDelay       time.Duration
	MaxDelay           time.Duration
	BackoffFactor      float64
	MaxRescues         int
	Trigger            rule.Rule
	RequeueOnInterrupt bool
	Concurrency        *Concurrency
	RateLimit          *RateLimit
}

// Concurrency is a task's concurrency limit as declared.
type Concurrency struct {
	Group, Key string
	Max        int
}

// RateLimit is a task's rate limit as declared.
type RateLimit struct {
	Group, Key string
	Limit      int
	Per        time.Duration
}

// Def is a validated workflow: what each run of it stores.
type Def struct {
	// ByName maps a task's name to its index.
	ByName map[string]int
	// Templates are the stored templates of its tasks, in order.
	Templates []store.TaskTemplate
	// Shape identifies the definition: two registrations of one name
	// must have the same.
	Shape string
	// Keyed is set when a task has a concurrency or rate limit.
	Keyed bool
	// Queues are the queues it names (its own and its tasks'), for the
	// engine to make sure they exist.
	Queues []string
	// Handles are its "workflow.task" names, which workers register.
	Handles []string
}

// Compile validates wf and builds its stored templates.
func (r Rules) Compile(wf Workflow) (*Def, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", r.ErrInvalidWorkflow, wf.Name, fmt.Sprintf(format, args...))
	}
	if check.Name(wf.Name) != nil {
		return nil, fmt.Errorf("%w: name %q must be 1-64 of A-Z a-z 0-9 _ . : -", r.ErrInvalidWorkflow, wf.Name)
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
	d := &Def{ByName: map[string]int{}, Queues: []string{}}
	if wf.Queue != "" {
		d.Queues = append(d.Queues, wf.Queue)
	}
	for i, t := range wf.Tasks {
		if check.Name(t.Name) != nil {
			return nil, bad("task %d: name %q must be 1-64 of A-Z a-z 0-9 _ . : -", i, t.Name)
		}
		if _, dup := d.ByName[t.Name]; dup {
			return nil, bad("duplicate task name %q", t.Name)
		}
		if !t.HasRun {
			return nil, bad("task %q has no Run handler", t.Name)
		}
		if t.Queue != "" && check.Name(t.Queue) != nil {
			return nil, bad("task %q: queue %q must be 1-64 of A-Z a-z 0-9 _ . : -", t.Name, t.Queue)
		}
		if t.Timeout < 0 || t.MaxAttempts < 0 || t.InitialDelay < 0 || t.MaxDelay < 0 || t.BackoffFactor < 0 || t.MaxRescues < 0 {
			return nil, bad("task %q: timeout, retry and rescue settings must not be negative", t.Name)
		}
		if t.BackoffFactor != 0 && t.BackoffFactor < 1 {
			return nil, bad("task %q: Retry.BackoffFactor %v must be >= 1", t.Name, t.BackoffFactor)
		}
		d.ByName[t.Name] = i
		d.Handles = append(d.Handles, wf.Name+"."+t.Name)
		if t.Queue != "" {
			d.Queues = append(d.Queues, t.Queue)
		}
	}
	deps := make([][]int, len(wf.Tasks))
	dependents := make([][]int, len(wf.Tasks))
	for i, t := range wf.Tasks {
		seen := map[string]bool{}
		for _, dep := range t.Deps {
			j, ok := d.ByName[dep]
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
	if cycle := findCycle(wf.Tasks, deps); cycle != "" {
		return nil, bad("cycle %s", cycle)
	}
	for i, t := range wf.Tasks {
		stored, err := compileTrigger(t, d.ByName)
		if err != nil {
			return nil, bad("task %q: %v", t.Name, err)
		}
		conc, rate, err := r.flowTemplates(wf.Name, t)
		if err != nil {
			return nil, err
		}
		d.Keyed = d.Keyed || conc != nil || rate != nil
		d.Templates = append(d.Templates, store.TaskTemplate{
			Idx: i, Name: t.Name, Queue: t.Queue, Priority: t.Priority,
			Deps: nonNil(deps[i]), Dependents: nonNil(dependents[i]),
			MaxAttempts: t.MaxAttempts, TriggerRule: stored,
			RequeueOnInterrupt: t.RequeueOnInterrupt, MaxRescues: t.MaxRescues,
			Concurrency: conc, RateLimit: rate,
		})
	}
	shape, _ := json.Marshal(struct {
		Queue string
		Tasks []store.TaskTemplate
	}{wf.Queue, d.Templates})
	d.Shape = string(shape)
	return d, nil
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// compileTrigger validates the rule of task t and returns its stored
// form (nil for the default).
func compileTrigger(t Task, byName map[string]int) (json.RawMessage, error) {
	raw, err := t.Trigger.ForTask(t.Deps, func(name string) bool { _, ok := byName[name]; return ok })
	if err != nil {
		return nil, fmt.Errorf("trigger rule: %w", err)
	}
	return raw, nil
}

// findCycle returns a cycle of tasks (deps[i] are the indexes task i
// depends on) as "a -> b -> a", or "".
func findCycle(tasks []Task, deps [][]int) string {
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
					names = append(names, tasks[k].Name)
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

// StoreErr turns a store error about what into the engine's typed
// errors: ErrNotFound, ErrInvalidInput for a value the store refused.
func (r Rules) StoreErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s: %w", what, r.ErrNotFound)
	}
	if errors.Is(err, store.ErrInvalidValue) {
		return fmt.Errorf("%s: %w: %w", what, r.ErrInvalidInput, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
