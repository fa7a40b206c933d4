package engine

// ConfigOf exposes an engine's effective config to tests.
func ConfigOf(e *Engine) Config { return e.cfg }

// FailedTries returns how many database calls of the engine's loop called
// name ("claim:<queue>", "completer", "heartbeat", "rescuer", "pruner",
// "counts", "scheduler") have failed, and with name "" those of every loop.
func FailedTries(e *Engine, name string) int64 { return e.health.FailedTries(name) }

// Evaluate is the engine's trigger rule evaluator (store.Evaluator).
var Evaluate = evaluate
