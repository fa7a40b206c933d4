package engine

import (
	"slices"

	"github.com/cairnhq/cairn/store"
)

// handles returns the "workflow.task" names of the registered workflows,
// sorted: the tasks this worker claims (see internal/routing).
func (e *Engine) handles() []string {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	out := []string{}
	for name, d := range e.workflows {
		for _, t := range d.wf.Tasks {
			out = append(out, name+"."+t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// definitions returns the registered workflows' versions, for
// workflow_versions and the worker row's versions (see internal/routing).
func (e *Engine) definitions() []store.WorkflowVersion {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	out := make([]store.WorkflowVersion, 0, len(e.workflows))
	for _, d := range e.workflows {
		out = append(out, d.stored)
	}
	return out
}
