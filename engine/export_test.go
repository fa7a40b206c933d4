package engine

// ConfigOf exposes an engine's effective config to tests.
func ConfigOf(e *Engine) Config { return e.cfg }
