package define_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/rule"
)

var (
	errWorkflow = errors.New("invalid workflow")
	errInput    = errors.New("invalid input")
	errUnknown  = errors.New("unknown workflow")
	errTooLarge = errors.New("input too large")
	rules       = define.Rules{ErrInvalidWorkflow: errWorkflow, ErrInvalidInput: errInput, ErrUnknownWorkflow: errUnknown,
		ErrInputTooLarge: errTooLarge, MaxInputBytes: 64, DefaultQueue: "default"}
)

// task is a task with a handler, depending on deps.
func task(name string, deps ...string) define.Task {
	return define.Task{Name: name, Deps: deps, HasRun: true, MaxAttempts: 3, MaxRescues: 3}
}

func TestCompileRefusesBadDefinitions(t *testing.T) {
	t.Parallel()
	with := func(tk define.Task, f func(*define.Task)) define.Task { f(&tk); return tk }
	for _, c := range []struct {
		name  string
		tasks []define.Task
		want  string
	}{
		{"unknown dependency", []define.Task{task("a", "zz")}, `invalid workflow "wf": task "a" depends on unknown task "zz"`},
		{"duplicate names", []define.Task{task("a"), task("a")}, `invalid workflow "wf": duplicate task name "a"`},
		{"dependency twice", []define.Task{task("a"), task("b", "a", "a")}, `task "b" lists dependency "a" twice`},
		{"self cycle", []define.Task{task("a", "a")}, `invalid workflow "wf": cycle a -> a`},
		{"cycle named from the earliest task", []define.Task{task("x"), task("c", "b"), task("a", "c"), task("b", "a")},
			`invalid workflow "wf": cycle c -> a -> b -> c`},
		{"no tasks", nil, `invalid workflow "wf": no tasks`},
		{"bad task name", []define.Task{task("a b")}, `task 0: name "a b" must be 1-64`},
		{"no handler", []define.Task{{Name: "a"}}, `task "a" has no Run handler`},
		{"bad queue", []define.Task{with(task("a"), func(t *define.Task) { t.Queue = "q q" })}, `task "a": queue "q q" must be`},
		{"negative", []define.Task{with(task("a"), func(t *define.Task) { t.Timeout = -1 })}, `must not be negative`},
		{"backoff", []define.Task{with(task("a"), func(t *define.Task) { t.BackoffFactor = 0.5 })}, `Retry.BackoffFactor 0.5 must be >= 1`},
		{"trigger names no dependency", []define.Task{task("a"), with(task("b"), func(t *define.Task) {
			t.Trigger = rule.Rule{Mode: "all", Conditions: []rule.Condition{{Kind: "succeeded", Task: "x"}}}
		})}, `task "b": trigger rule: `},
		{"concurrency max", []define.Task{with(task("a"), func(t *define.Task) { t.Concurrency = &define.Concurrency{} })},
			`invalid workflow: workflow "wf" task "a": Concurrency.Max: must be at least 1, got 0`},
		{"concurrency key", []define.Task{with(task("a"), func(t *define.Task) { t.Concurrency = &define.Concurrency{Max: 1, Key: "a..b"} })},
			`Concurrency.Key: key "a..b" must be a dotted path of non-empty names`},
		{"group too long", []define.Task{with(task("a"), func(t *define.Task) {
			t.Concurrency = &define.Concurrency{Max: 1, Group: strings.Repeat("g", 201)}
		})}, `Concurrency.Group: group`},
		{"rate per", []define.Task{with(task("a"), func(t *define.Task) { t.RateLimit = &define.RateLimit{Limit: 1} })},
			`RateLimit.Per: must be at least 1ms, got 0s`},
		{"rate key without group", []define.Task{with(task("a"), func(t *define.Task) {
			t.RateLimit = &define.RateLimit{Limit: 1, Per: time.Second, Key: "k"}
		})}, `RateLimit.Group: must be set with a Key ("k")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rules.Compile(define.Workflow{Name: "wf", Tasks: c.tasks})
			require.ErrorIs(t, err, errWorkflow)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := rules.Compile(define.Workflow{Name: "bad name", Tasks: []define.Task{task("a")}})
	require.EqualError(t, err, `invalid workflow: name "bad name" must be 1-64 of A-Z a-z 0-9 _ . : -`)
}

func TestCompileBuildsTemplates(t *testing.T) {
	t.Parallel()
	c := task("c", "a", "b")
	c.Concurrency = &define.Concurrency{Max: 2, Key: "customer.id"}
	d, err := rules.Compile(define.Workflow{Name: "wf", Tasks: []define.Task{task("a"), task("b", "a"), c}})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 0, "b": 1, "c": 2}, d.ByName)
	require.True(t, d.Keyed)
	require.Len(t, d.Templates, 3)
	require.Equal(t, []int{}, d.Templates[0].Deps)
	require.Equal(t, []int{1, 2}, d.Templates[0].Dependents)
	require.Equal(t, []int{0, 1}, d.Templates[2].Deps)
	require.Equal(t, "wf.c", d.Templates[2].Concurrency.Group)
	require.Equal(t, []string{"customer", "id"}, d.Templates[2].Concurrency.Path)

	// The shape is the definition's identity: the same twice, another
	// for another dependency.
	again, err := rules.Compile(define.Workflow{Name: "wf", Tasks: []define.Task{task("a"), task("b", "a"), c}})
	require.NoError(t, err)
	require.Equal(t, d.Shape, again.Shape)
	other, err := rules.Compile(define.Workflow{Name: "wf", Tasks: []define.Task{task("a"), task("b"), c}})
	require.NoError(t, err)
	require.NotEqual(t, d.Shape, other.Shape)
}

func TestPrepare(t *testing.T) {
	t.Parallel()
	keyed, err := rules.Compile(define.Workflow{Name: "wf", Tasks: []define.Task{{Name: "a", HasRun: true,
		RateLimit: &define.RateLimit{Group: "g", Key: "customer", Limit: 1, Per: time.Second}}}})
	require.NoError(t, err)
	run := func(input any, o define.Options) define.Run {
		return define.Run{Workflow: "wf", Templates: keyed.Templates, Keyed: keyed.Keyed, Input: input, Options: o}
	}
	key, empty, zero, second, old := "k", "", time.Duration(0), time.Second, time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	prio := 1 << 40
	for _, c := range []struct {
		name string
		run  define.Run
		is   error
		want string
	}{
		{"not an object", run("[1]", define.Options{}), errInput, `workflow "wf": invalid input: must be a JSON object`},
		{"not JSON", run("{", define.Options{}), errInput, `not valid JSON`},
		{"too large", run(`{"customer": "`+strings.Repeat("x", 64)+`"}`, define.Options{}), errTooLarge, `workflow "wf": input too large: 80 bytes, limit 64`},
		{"NUL in JSON", run(`{"customer": "\u0000"}`, define.Options{}), errInput, `NUL`},
		{"no flow key", run(`{"other": 1}`, define.Options{}), errInput, `task "a": no value at "customer" for its rate limit key`},
		{"bad queue", run(`{"customer": 1}`, define.Options{Queue: "a b"}), errInput, `invalid input: queue "a b": must be 1-64`},
		{"empty key", run(`{"customer": 1}`, define.Options{Key: &empty}), errInput, `key: idempotency key must be 1-512 bytes`},
		{"window without key", run(`{"customer": 1}`, define.Options{UniqueFor: &second}), errInput, `unique_for: needs a key`},
		{"zero window", run(`{"customer": 1}`, define.Options{Key: &key, UniqueFor: &zero}), errInput, `unique_for: window 0s must be positive`},
		{"priority", run(`{"customer": 1}`, define.Options{Priority: &prio}), errInput, `priority`},
		{"run at", run(`{"customer": 1}`, define.Options{RunAt: &old}), errInput, `run_at: year 0: must be between 1 and 9999`},
		{"after id", run(`{"customer": 1}`, define.Options{After: []int64{0}}), errInput, `after: run id 0 must be positive`},
		{"after rule alone", run(`{"customer": 1}`, define.Options{AfterRule: &rule.Rule{Shorthand: "all_done"}}), errInput, `after_rule: needs after`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rules.Prepare(c.run)
			require.ErrorIs(t, err, c.is)
			require.ErrorContains(t, err, c.want)
		})
	}

	p, err := rules.Prepare(run(` {"customer": 7} `, define.Options{Key: &key}))
	require.NoError(t, err)
	require.JSONEq(t, `{"customer": 7}`, string(p.Input))
	require.Equal(t, "default", p.Queue)
	require.Equal(t, &key, p.Key)
	r := run(nil, define.Options{Queue: "q"})
	r.Keyed = false
	p, err = rules.Prepare(r)
	require.NoError(t, err)
	require.Equal(t, json.RawMessage("{}"), p.Input)
	require.Equal(t, "q", p.Queue)
	require.Equal(t, []string{"q"}, define.ReadyQueues([]store.RunInsertParams{p}))
}

func TestUnknownWorkflowNamesTheKnown(t *testing.T) {
	t.Parallel()
	require.EqualError(t, rules.UnknownWorkflow("x", nil), `unknown workflow "x": no workflow is registered`)
	require.EqualError(t, rules.UnknownWorkflow("x", []string{"a", "b"}), `unknown workflow "x"; known workflows: a, b`)
	many := make([]string, 25)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	err := rules.UnknownWorkflow("x", many)
	require.ErrorIs(t, err, errUnknown)
	require.ErrorContains(t, err, "t, and 5 more")
	require.ErrorIs(t, rules.CheckWorkflow(""), errInput)
	require.ErrorContains(t, rules.CheckWorkflow("a\x00"), "workflow: contains a NUL byte")
}

func TestPrepareAllNamesTheFailingRun(t *testing.T) {
	t.Parallel()
	prepare := func(i int) (store.RunInsertParams, error) {
		if i == 1 {
			return store.RunInsertParams{}, errInput
		}
		return store.RunInsertParams{Queue: []string{"", "", "q"}[i]}, nil
	}
	_, _, err := define.PrepareAll(2, prepare, nil)
	require.EqualError(t, err, "run 1: invalid input")
	_, _, err = define.PrepareAll(1, func(int) (store.RunInsertParams, error) { return prepare(1) }, nil)
	require.EqualError(t, err, "invalid input", "one run is not numbered")

	ps, queues, err := define.PrepareAll(3, func(i int) (store.RunInsertParams, error) {
		if i == 1 {
			i = 0
		}
		return prepare(i)
	}, json.RawMessage(`{"by":"me"}`))
	require.NoError(t, err)
	require.Len(t, ps, 3)
	require.Equal(t, []string{"q"}, queues)
	require.JSONEq(t, `{"by":"me"}`, string(ps[2].Detail))
}
