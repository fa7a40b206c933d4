// Package rule holds Cairn's trigger rules and task context, once for
// the store, the engine and the web server: a rule's stored JSON form,
// its validation, its evaluation over the states of a task's finished
// dependencies, and the merge of a run's input with those dependencies'
// outputs that a task reads as its context.
//
// It imports nothing of Cairn's, so that the store can decide rules
// itself, in the transaction that releases a task.
package rule

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Rule is a trigger rule in its stored form: Mode "all", "any" or "none"
// over Conditions, or a Shorthand: all_success (the default, also the
// zero Rule), all_done, one_failed or none_failed.
type Rule struct {
	Mode       string      `json:"mode,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Shorthand  string      `json:"shorthand,omitempty"`
}

// Condition is one test of a rule.
type Condition struct {
	Kind  string `json:"kind"`            // succeeded, failed, skipped, context, run_succeeded, run_failed
	Task  string `json:"task,omitempty"`  // for succeeded/failed/skipped
	Run   int64  `json:"run,omitempty"`   // for run_succeeded/run_failed
	Key   string `json:"key,omitempty"`   // for context: dotted path in the merged context
	Op    string `json:"op,omitempty"`    // for context: eq ne gt lt contains not_contains exists not_exists
	Value any    `json:"value,omitempty"` // for context
}

// Dep is a finished dependency as a rule sees it: a task of the run, or,
// for a root task of a run that waits for other runs, one of those runs
// (Run set, Status the run's final status, no Output). Statuses are the
// stored ones ("completed", "failed", ...).
type Dep struct {
	Idx    int             `json:"idx"`
	Name   string          `json:"name"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output"`
	Run    int64           `json:"run,omitempty"`
}

// The stored statuses a rule reads, of tasks and of runs.
const (
	completed = "completed"
	failed    = "failed"
	skipped   = "skipped"
	cancelled = "cancelled"
)

// ContextOps are the operators of a context condition.
var ContextOps = []string{"eq", "ne", "gt", "lt", "contains", "not_contains", "exists", "not_exists"}

// IsDefault reports whether r is the default rule, all_success, written
// as the zero Rule or as its shorthand.
func (r Rule) IsDefault() bool {
	return r.Mode == "" && len(r.Conditions) == 0 && (r.Shorthand == "" || r.Shorthand == "all_success")
}

// Parse decodes a stored rule; nil or null is the default rule.
func Parse(raw json.RawMessage) (Rule, error) {
	var r Rule
	if len(raw) == 0 || string(raw) == "null" {
		return r, nil
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("decode trigger rule: %w", err)
	}
	return r, nil
}

// ForTask validates r as the rule of a task with dependencies deps among
// the tasks of its workflow (known reports whether a name is one), and
// returns its stored form: nil for the default rule.
func (r Rule) ForTask(deps []string, known func(task string) bool) (json.RawMessage, error) {
	if r.IsDefault() {
		return nil, nil
	}
	return r.stored(func(c Condition) error {
		switch c.Kind {
		case "succeeded", "failed", "skipped":
			if !slices.Contains(deps, c.Task) {
				if !known(c.Task) {
					return fmt.Errorf("%s(%q): unknown task", c.Kind, c.Task)
				}
				return fmt.Errorf("%s(%q): not a dependency", c.Kind, c.Task)
			}
			return nil
		case "context":
			return checkContext(c)
		case "run_succeeded", "run_failed":
			return fmt.Errorf("%s(%d): run conditions belong in the rule of WithAfterRule", c.Kind, c.Run)
		}
		return fmt.Errorf("condition kind %q must be succeeded, failed, skipped or context", c.Kind)
	})
}

// ForAfter validates r as the rule of the root tasks of a run that waits
// for the runs after, and returns its stored form.
func (r Rule) ForAfter(after []int64) (json.RawMessage, error) {
	if r.Shorthand == "" && r.Mode == "" {
		return nil, fmt.Errorf("give a shorthand (AllSuccess, AllDone, ...) or a mode (All, Any, None)")
	}
	return r.stored(func(c Condition) error {
		switch c.Kind {
		case "run_succeeded", "run_failed":
			if !slices.Contains(after, c.Run) {
				return fmt.Errorf("%s(%d): not a run of WithAfter", c.Kind, c.Run)
			}
			return nil
		case "context":
			return checkContext(c)
		case "succeeded", "failed", "skipped":
			return fmt.Errorf("%s(%q): root tasks have no task dependencies; use RunSucceeded or RunFailed", c.Kind, c.Task)
		}
		return fmt.Errorf("condition kind %q must be run_succeeded, run_failed or context", c.Kind)
	})
}

// stored validates the shape of r (a shorthand alone, or a mode with
// conditions) and each condition with cond, and returns r's stored form.
func (r Rule) stored(cond func(Condition) error) (json.RawMessage, error) {
	if err := r.check(cond); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// check is stored without the encoding.
func (r Rule) check(cond func(Condition) error) error {
	if r.Shorthand != "" {
		if r.Mode != "" || len(r.Conditions) > 0 {
			return fmt.Errorf("a shorthand takes no mode or conditions")
		}
		switch r.Shorthand {
		case "all_success", "all_done", "one_failed", "none_failed":
			return nil
		}
		return fmt.Errorf("unknown shorthand %q", r.Shorthand)
	}
	switch r.Mode {
	case "all", "any", "none":
	default:
		return fmt.Errorf("mode %q must be all, any or none", r.Mode)
	}
	if len(r.Conditions) == 0 {
		return fmt.Errorf("mode %q needs conditions", r.Mode)
	}
	for _, c := range r.Conditions {
		if err := cond(c); err != nil {
			return err
		}
	}
	return nil
}

func checkContext(c Condition) error {
	if c.Key == "" {
		return fmt.Errorf("context condition needs a key")
	}
	if !slices.Contains(ContextOps, c.Op) {
		return fmt.Errorf("context op %q must be one of %s", c.Op, strings.Join(ContextOps, ", "))
	}
	return nil
}

// Eval decides the stored rule raw (nil: the default) of a task whose
// dependencies deps, in declaration order, all finished, in a run with
// input: true runs the task, false skips it.
func Eval(raw json.RawMessage, deps []Dep, input json.RawMessage) (bool, error) {
	r, err := Parse(raw)
	if err != nil {
		return false, err
	}
	return r.Holds(deps, input)
}

// Holds decides r over deps (see Eval).
func (r Rule) Holds(deps []Dep, input json.RawMessage) (bool, error) {
	count := func(status string) int {
		n := 0
		for _, d := range deps {
			if d.Status == status {
				n++
			}
		}
		return n
	}
	switch r.Shorthand {
	case "", "all_success":
		if r.Mode == "" {
			return count(completed) == len(deps), nil
		}
	case "all_done":
		return true, nil
	case "one_failed":
		return count(failed) > 0, nil
	case "none_failed":
		return count(failed) == 0 && count(cancelled) == 0, nil
	default:
		return false, fmt.Errorf("unknown shorthand %q", r.Shorthand)
	}
	var merged map[string]any
	if slices.ContainsFunc(r.Conditions, func(c Condition) bool { return c.Kind == "context" }) {
		outputs := make([]json.RawMessage, len(deps))
		for i, d := range deps {
			outputs[i] = d.Output
		}
		m, err := Merge(input, outputs...)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(m, &merged); err != nil {
			return false, err
		}
	}
	status := map[string]string{}
	runStatus := map[int64]string{}
	for _, d := range deps {
		if d.Run != 0 {
			runStatus[d.Run] = d.Status
			continue
		}
		status[d.Name] = d.Status
	}
	held := 0
	for _, c := range r.Conditions {
		ok := false
		switch c.Kind {
		case "succeeded":
			ok = status[c.Task] == completed
		case "failed":
			ok = status[c.Task] == failed
		case "skipped":
			ok = status[c.Task] == skipped
		case "context":
			ok = compare(merged, c)
		case "run_succeeded":
			ok = runStatus[c.Run] == completed
		case "run_failed":
			ok = runStatus[c.Run] == failed || runStatus[c.Run] == cancelled
		}
		if ok {
			held++
		}
	}
	switch r.Mode {
	case "all":
		return held == len(r.Conditions), nil
	case "any":
		return held > 0, nil
	case "none":
		return held == 0, nil
	}
	return false, fmt.Errorf("unknown mode %q", r.Mode)
}

// Merge is a task's context: the run input (a JSON object) with the
// outputs of its dependencies, in declaration order, merged in, later
// ones winning on key clashes. Outputs that are not objects add no keys.
// When input is not an object it returns, with the error, the merge of
// the outputs alone.
func Merge(input json.RawMessage, outputs ...json.RawMessage) (json.RawMessage, error) {
	merged := map[string]json.RawMessage{}
	var inputErr error
	if len(input) > 0 {
		if err := json.Unmarshal(input, &merged); err != nil {
			inputErr = fmt.Errorf("decode run input: %w", err)
		}
		if merged == nil || inputErr != nil {
			merged = map[string]json.RawMessage{}
		}
	}
	for _, o := range outputs {
		var out map[string]json.RawMessage
		if len(o) == 0 || json.Unmarshal(o, &out) != nil {
			continue
		}
		for k, v := range out {
			merged[k] = v
		}
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	return b, inputErr
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// compare applies a context condition; values are compared as decoded
// JSON (numbers as float64).
func compare(m map[string]any, c Condition) bool {
	v, ok := lookup(m, c.Key)
	want := normalize(c.Value)
	switch c.Op {
	case "exists":
		return ok
	case "not_exists":
		return !ok
	case "eq":
		return ok && reflect.DeepEqual(v, want)
	case "ne":
		return !ok || !reflect.DeepEqual(v, want)
	case "gt", "lt":
		if !ok {
			return false
		}
		if a, aok := v.(float64); aok {
			if b, bok := want.(float64); bok {
				return (c.Op == "gt" && a > b) || (c.Op == "lt" && a < b)
			}
		}
		if a, aok := v.(string); aok {
			if b, bok := want.(string); bok {
				return (c.Op == "gt" && a > b) || (c.Op == "lt" && a < b)
			}
		}
		return false
	case "contains", "not_contains":
		has := false
		switch x := v.(type) {
		case string:
			s, isStr := want.(string)
			has = isStr && strings.Contains(x, s)
		case []any:
			has = slices.ContainsFunc(x, func(e any) bool { return reflect.DeepEqual(e, want) })
		case map[string]any:
			s, isStr := want.(string)
			_, has = x[s]
			has = has && isStr
		}
		if c.Op == "contains" {
			return ok && has
		}
		return !has
	}
	return false
}

// normalize round-trips v through JSON so it compares with decoded values.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
