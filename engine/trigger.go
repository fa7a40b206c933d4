package engine

import "github.com/cairnhq/cairn/store/rule"

// TriggerRule decides, once every dependency of a task finished, whether
// the task runs or is skipped: Mode "all", "any" or "none" over
// Conditions, or one of the shorthands AllSuccess (default), AllDone,
// OneFailed and NoneFailed. It is the rule's stored form, decided by
// package rule wherever a task is released.
type TriggerRule = rule.Rule

// Condition is one test of a trigger rule. Build it with Succeeded,
// Failed, Skipped, Context, or, in a rule given to WithAfterRule,
// RunSucceeded and RunFailed.
type Condition = rule.Condition

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
