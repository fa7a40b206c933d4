package engine

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
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
	// Version names this definition; each run records the version it was
	// created with and is worked only by workers that serve it. Defaults
	// to a content hash of the definition (see WorkflowDefs).
	Version string
	// Compatible lists earlier versions whose runs these handlers also
	// serve (each such task is run by its name).
	Compatible []string
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

// registry holds the registered workflows.
type registry struct {
	wfMu      sync.RWMutex
	workflows map[string]*workflowDef
	keyed     atomic.Bool // a registered task has a flow limit: claims take keyed tasks
}

// workflowDef is a validated, registered workflow: its definition and
// what define.Compile made of it.
type workflowDef struct {
	wf        Workflow
	byName    map[string]int
	templates []store.TaskTemplate
	shape     string
	keyed     bool                  // a task has a concurrency or rate limit
	stored    store.WorkflowVersion // its version, as workflow_versions stores it
	queues    []string              // the queues it names
	handles   []string              // its "workflow.task" names
}

// compile validates wf and builds its stored templates (define.Compile).
func compile(wf Workflow) (*workflowDef, error) {
	in := define.Workflow{Name: wf.Name, Queue: wf.Queue, Tasks: make([]define.Task, len(wf.Tasks))}
	for i, t := range wf.Tasks {
		rp := t.Retry.withDefaults()
		in.Tasks[i] = define.Task{Name: t.Name, Deps: t.Deps, HasRun: t.Run != nil, Queue: t.Queue, Priority: t.Priority,
			Timeout: t.Timeout, MaxAttempts: rp.MaxAttempts, InitialDelay: rp.InitialDelay, MaxDelay: rp.MaxDelay,
			BackoffFactor: rp.BackoffFactor, MaxRescues: cmp.Or(t.MaxRescues, DefaultMaxRescues), Trigger: t.Trigger,
			RequeueOnInterrupt: t.RequeueOnInterrupt}
		if c := t.Concurrency; c != nil {
			in.Tasks[i].Concurrency = &define.Concurrency{Group: c.Group, Key: c.Key, Max: c.Max}
		}
		if r := t.RateLimit; r != nil {
			in.Tasks[i].RateLimit = &define.RateLimit{Group: r.Group, Key: r.Key, Limit: r.Limit, Per: r.Per}
		}
	}
	d, err := rules.Compile(in)
	if err != nil {
		return nil, err
	}
	return &workflowDef{wf: wf, byName: d.ByName, templates: d.Templates, shape: d.Shape, keyed: d.Keyed, queues: d.Queues,
		handles: d.Handles}, nil
}
