package define

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/store"
)

// Upstream returns the index in ts of the task named name and the
// indexes of the tasks upstream of it (its dependencies, theirs, and so
// on), in index order; ErrInvalidInput naming the task, and the tasks
// there are, when ts has none of that name.
func (r Rules) Upstream(workflow string, ts []store.TaskTemplate, name string) (int, []int, error) {
	at := slices.IndexFunc(ts, func(t store.TaskTemplate) bool { return t.Name == name })
	if at < 0 {
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.Name
		}
		return 0, nil, fmt.Errorf("%w: task %q: workflow %q has no such task; its tasks: %s", r.ErrInvalidInput, name, workflow, strings.Join(names, ", "))
	}
	seen := make([]bool, len(ts))
	stack := slices.Clone(ts[at].Deps)
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if d < 0 || d >= len(ts) || seen[d] {
			continue
		}
		seen[d] = true
		stack = append(stack, ts[d].Deps...)
	}
	var up []int
	for i, s := range seen {
		if s {
			up = append(up, i)
		}
	}
	return at, up, nil
}
