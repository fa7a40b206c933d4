package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/store"
)

// TriggerRule decides, once every dependency of a task finished, whether
// the task runs or is skipped: Mode "all", "any" or "none" over
// Conditions, or one of the shorthands AllSuccess (default), AllDone,
// OneFailed and NoneFailed.
type TriggerRule struct {
	Mode       string      `json:"mode,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Shorthand  string      `json:"shorthand,omitempty"`
}

// Condition is one test of a trigger rule. Build it with Succeeded,
// Failed, Skipped, Context, or, in a rule given to WithAfterRule,
// RunSucceeded and RunFailed.
type Condition struct {
	Kind  string `json:"kind"`            // succeeded, failed, skipped, context, run_succeeded, run_failed
	Task  string `json:"task,omitempty"`  // for succeeded/failed/skipped
	Run   int64  `json:"run,omitempty"`   // for run_succeeded/run_failed
	Key   string `json:"key,omitempty"`   // for context: dotted path in the merged context
	Op    string `json:"op,omitempty"`    // for context: eq ne gt lt contains not_contains exists not_exists
	Value any    `json:"value,omitempty"` // for context
}

// Trigger rule shorthands.
var (
	// AllSuccess runs the task when every dependency completed (default).
	AllSuccess = TriggerRule{Shorthand: "all_success"}
	// AllDone runs the task whatever its dependencies' outcomes.
	AllDone = TriggerRule{Shorthand: "all_done"}
	// OneFailed runs the task when at least one dependency failed.
	OneFailed = TriggerRule{Shorthand: "one_failed"}
	// NoneFailed runs the task when no dependency failed (skips allowed).
	NoneFailed = TriggerRule{Shorthand: "none_failed"}
)

// All holds when every condition holds.
func All(c ...Condition) TriggerRule { return TriggerRule{Mode: "all", Conditions: c} }

// Any holds when at least one condition holds.
func Any(c ...Condition) TriggerRule { return TriggerRule{Mode: "any", Conditions: c} }

// None holds when no condition holds.
func None(c ...Condition) TriggerRule { return TriggerRule{Mode: "none", Conditions: c} }

// Succeeded holds when dependency task completed.
func Succeeded(task string) Condition { return Condition{Kind: "succeeded", Task: task} }

// Failed holds when dependency task failed.
func Failed(task string) Condition { return Condition{Kind: "failed", Task: task} }

// Skipped holds when dependency task was skipped.
func Skipped(task string) Condition { return Condition{Kind: "skipped", Task: task} }

// RunSucceeded holds when run id, one the run waits for (WithAfter),
// completed. Use it in a rule given to WithAfterRule.
func RunSucceeded(id int64) Condition { return Condition{Kind: "run_succeeded", Run: id} }

// RunFailed holds when run id, one the run waits for (WithAfter), failed
// or was cancelled. Use it in a rule given to WithAfterRule.
func RunFailed(id int64) Condition { return Condition{Kind: "run_failed", Run: id} }

// Context compares the value at key (a dotted path) of the merged context
// (run input and dependency outputs) with value using op.
func Context(key, op string, value any) Condition {
	return Condition{Kind: "context", Key: key, Op: op, Value: value}
}

var contextOps = []string{"eq", "ne", "gt", "lt", "contains", "not_contains", "exists", "not_exists"}

// compile validates the rule for task t and returns its stored form (nil
// for the default).
func (r TriggerRule) compile(t Task, byName map[string]int) (json.RawMessage, error) {
	if r.Shorthand == "" && r.Mode == "" && len(r.Conditions) == 0 {
		return nil, nil
	}
	if r.Shorthand != "" {
		if r.Mode != "" || len(r.Conditions) > 0 {
			return nil, fmt.Errorf("trigger rule: a shorthand takes no mode or conditions")
		}
		switch r.Shorthand {
		case "all_success":
			return nil, nil
		case "all_done", "one_failed", "none_failed":
		default:
			return nil, fmt.Errorf("trigger rule: unknown shorthand %q", r.Shorthand)
		}
		return json.Marshal(r)
	}
	switch r.Mode {
	case "all", "any", "none":
	default:
		return nil, fmt.Errorf("trigger rule: mode %q must be all, any or none", r.Mode)
	}
	if len(r.Conditions) == 0 {
		return nil, fmt.Errorf("trigger rule: mode %q needs conditions", r.Mode)
	}
	for _, c := range r.Conditions {
		switch c.Kind {
		case "succeeded", "failed", "skipped":
			if !slices.Contains(t.Deps, c.Task) {
				if _, ok := byName[c.Task]; !ok {
					return nil, fmt.Errorf("trigger rule: %s(%q): unknown task", c.Kind, c.Task)
				}
				return nil, fmt.Errorf("trigger rule: %s(%q): not a dependency", c.Kind, c.Task)
			}
		case "context":
			if c.Key == "" {
				return nil, fmt.Errorf("trigger rule: context condition needs a key")
			}
			if !slices.Contains(contextOps, c.Op) {
				return nil, fmt.Errorf("trigger rule: context op %q must be one of %s", c.Op, strings.Join(contextOps, ", "))
			}
		case "run_succeeded", "run_failed":
			return nil, fmt.Errorf("trigger rule: %s(%d): run conditions belong in the rule of WithAfterRule", c.Kind, c.Run)
		default:
			return nil, fmt.Errorf("trigger rule: condition kind %q must be succeeded, failed, skipped or context", c.Kind)
		}
	}
	return json.Marshal(r)
}

// compileAfter validates r as the rule of a run's root tasks that wait
// for the runs after (WithAfterRule) and returns its stored form.
func (r TriggerRule) compileAfter(after []int64) (json.RawMessage, error) {
	if r.Shorthand != "" {
		if r.Mode != "" || len(r.Conditions) > 0 {
			return nil, fmt.Errorf("a shorthand takes no mode or conditions")
		}
		switch r.Shorthand {
		case "all_success", "all_done", "one_failed", "none_failed":
		default:
			return nil, fmt.Errorf("unknown shorthand %q", r.Shorthand)
		}
		return json.Marshal(r)
	}
	switch r.Mode {
	case "all", "any", "none":
	case "":
		return nil, fmt.Errorf("give a shorthand (AllSuccess, AllDone, ...) or a mode (All, Any, None)")
	default:
		return nil, fmt.Errorf("mode %q must be all, any or none", r.Mode)
	}
	if len(r.Conditions) == 0 {
		return nil, fmt.Errorf("mode %q needs conditions", r.Mode)
	}
	for _, c := range r.Conditions {
		switch c.Kind {
		case "run_succeeded", "run_failed":
			if !slices.Contains(after, c.Run) {
				return nil, fmt.Errorf("%s(%d): not a run of WithAfter", c.Kind, c.Run)
			}
		case "context":
			if c.Key == "" {
				return nil, fmt.Errorf("context condition needs a key")
			}
			if !slices.Contains(contextOps, c.Op) {
				return nil, fmt.Errorf("context op %q must be one of %s", c.Op, strings.Join(contextOps, ", "))
			}
		case "succeeded", "failed", "skipped":
			return nil, fmt.Errorf("%s(%q): root tasks have no task dependencies; use RunSucceeded or RunFailed", c.Kind, c.Task)
		default:
			return nil, fmt.Errorf("condition kind %q must be run_succeeded, run_failed or context", c.Kind)
		}
	}
	return json.Marshal(r)
}

// evaluate implements store.Evaluator.
func evaluate(raw json.RawMessage, deps []store.DepState, input json.RawMessage) (bool, error) {
	var r TriggerRule
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r); err != nil {
			return false, fmt.Errorf("decode trigger rule: %w", err)
		}
	}
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
			return count(store.StatusCompleted) == len(deps), nil
		}
	case "all_done":
		return true, nil
	case "one_failed":
		return count(store.StatusFailed) > 0, nil
	case "none_failed":
		return count(store.StatusFailed) == 0 && count(store.StatusCancelled) == 0, nil
	default:
		return false, fmt.Errorf("unknown shorthand %q", r.Shorthand)
	}
	var merged map[string]any
	hasContext := slices.ContainsFunc(r.Conditions, func(c Condition) bool { return c.Kind == "context" })
	if hasContext {
		m, err := mergeContext(input, deps)
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
			ok = status[c.Task] == store.StatusCompleted
		case "failed":
			ok = status[c.Task] == store.StatusFailed
		case "skipped":
			ok = status[c.Task] == store.StatusSkipped
		case "context":
			ok = compare(merged, c)
		case "run_succeeded":
			ok = runStatus[c.Run] == store.RunCompleted
		case "run_failed":
			ok = runStatus[c.Run] == store.RunFailed || runStatus[c.Run] == store.RunCancelled
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

// mergeContext merges the run input with dependency outputs, later
// dependencies winning on key clashes.
func mergeContext(input json.RawMessage, deps []store.DepState) (json.RawMessage, error) {
	merged := map[string]json.RawMessage{}
	if len(input) > 0 {
		if err := json.Unmarshal(input, &merged); err != nil {
			return nil, fmt.Errorf("decode run input: %w", err)
		}
	}
	for _, d := range deps {
		if len(d.Output) == 0 || string(d.Output) == "null" {
			continue
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(d.Output, &out); err != nil {
			continue // outputs that are not objects add no keys
		}
		for k, v := range out {
			merged[k] = v
		}
	}
	return json.Marshal(merged)
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
