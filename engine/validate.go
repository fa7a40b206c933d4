package engine

import (
	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// The entry points check what callers pass before any of it reaches the
// database, and name the field that was wrong (see define.Rules and
// package check).

// rules are the checks of definitions and runs with the engine's error
// values; inputRules adds the engine's input limit.
var rules = define.Rules{ErrInvalidWorkflow: ErrInvalidWorkflow, ErrInvalidInput: ErrInvalidInput,
	ErrUnknownWorkflow: ErrUnknownWorkflow, ErrInputTooLarge: ErrInputTooLarge, DefaultQueue: DefaultQueue, ErrNotFound: ErrNotFound, ErrInvalidState: ErrInvalidState}

func (e *Engine) inputRules() define.Rules {
	r := rules
	r.MaxInputBytes = e.cfg.MaxInputBytes
	return r
}

// checkName returns ErrInvalidInput unless name is a valid queue or
// schedule name.
func checkName(field, name string) error { return rules.Name(field, name) }

// checkInt32 returns ErrInvalidInput unless n fits a 32-bit integer column.
func checkInt32(field string, n int) error { return rules.Int32(field, n) }

// pgSafeItem makes what a finished attempt writes storable whatever its
// handler produced: one error message or log line with a NUL byte would
// otherwise fail the whole completion batch, again and again.
func pgSafeItem(item store.TransitionItem) store.TransitionItem {
	if item.Error != nil && check.Text(*item.Error) != nil {
		msg := check.SafeText(*item.Error)
		item.Error = &msg
	}
	item.Detail = check.SafeJSON(item.Detail)
	item.Output = check.SafeJSON(item.Output)
	return item
}
