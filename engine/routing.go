package engine

import "github.com/cairnhq/cairn/engine/internal/routing"

// registered returns the registered workflows' handles and versions:
// what the worker claims and workflow_versions stores (see
// internal/routing).
func (e *Engine) registered() (r routing.Registered) {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	for _, d := range e.workflows {
		r.Handles, r.Versions = append(r.Handles, d.handles...), append(r.Versions, d.stored)
	}
	return r
}
