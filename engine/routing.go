package engine

import "slices"

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
