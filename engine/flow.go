package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Concurrency limits how many tasks of a group and key value run at once,
// cluster-wide and atomically, also across many engines. Tasks over the
// limit stay ready and spend no attempt; a running task that defers
// (DeferUntil) gives its place back until it resumes.
type Concurrency struct {
	// Group names the limit: tasks of any workflow with the same group
	// and key value share it. Defaults to "workflow.task".
	Group string
	// Key is a dotted path into the run input ("customer", "account.id")
	// whose value keys the limit; "" is one limit for the whole group.
	Key string
	// Max is how many may run at once (at least 1).
	Max int
}

// RateLimit limits how many tasks of a group and key value start in any
// window of length Per, cluster-wide, by the database clock. A task held
// back stays ready with its available_at moved to when it may start, and
// spends no attempt.
type RateLimit struct {
	// Group names the limit; required when Key is set. Defaults to
	// "workflow.task" when both are empty.
	Group string
	// Key is a dotted path into the run input; "" is one limit for the group.
	Key string
	// Limit is how many starts a window may hold (at least 1).
	Limit int
	// Per is the window's length (at least a millisecond).
	Per time.Duration
}

// flowTemplates checks a task's flow-control declarations and returns
// them as stored on each new task.
func flowTemplates(wf string, t Task) (conc, rate *store.FlowTemplate, err error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: workflow %q task %q: %s: %s", ErrInvalidWorkflow, wf, t.Name, field, fmt.Sprintf(format, args...))
	}
	group := func(field, g string) (string, error) {
		if g == "" {
			g = wf + "." + t.Name
		}
		if len(g) > 200 || strings.ContainsRune(g, 0x1f) || strings.ContainsRune(g, 0) {
			return "", bad(field, "group %q must be at most 200 bytes without control characters U+0000 and U+001F", g)
		}
		return g, nil
	}
	path := func(field, key string) ([]string, error) {
		if key == "" {
			return nil, nil
		}
		parts := strings.Split(key, ".")
		for _, p := range parts {
			if p == "" {
				return nil, bad(field, "key %q must be a dotted path of non-empty names", key)
			}
		}
		return parts, nil
	}
	if c := t.Concurrency; c != nil {
		if c.Max < 1 {
			return nil, nil, bad("Concurrency.Max", "must be at least 1, got %d", c.Max)
		}
		g, err := group("Concurrency.Group", c.Group)
		if err != nil {
			return nil, nil, err
		}
		p, err := path("Concurrency.Key", c.Key)
		if err != nil {
			return nil, nil, err
		}
		conc = &store.FlowTemplate{Group: g, Path: p, Max: c.Max}
	}
	if r := t.RateLimit; r != nil {
		if r.Limit < 1 {
			return nil, nil, bad("RateLimit.Limit", "must be at least 1, got %d", r.Limit)
		}
		if r.Per < time.Millisecond {
			return nil, nil, bad("RateLimit.Per", "must be at least 1ms, got %s", r.Per)
		}
		if r.Group == "" && r.Key != "" {
			return nil, nil, bad("RateLimit.Group", "must be set with a Key (%q): name the limit the tasks share", r.Key)
		}
		g, err := group("RateLimit.Group", r.Group)
		if err != nil {
			return nil, nil, err
		}
		p, err := path("RateLimit.Key", r.Key)
		if err != nil {
			return nil, nil, err
		}
		rate = &store.FlowTemplate{Group: g, Path: p, Limit: r.Limit, Per: r.Per}
	}
	return conc, rate, nil
}

// checkFlowKeys returns ErrInvalidInput when the run input has no value
// at the key path of one of the workflow's limited tasks.
func checkFlowKeys(def *workflowDef, input json.RawMessage) error {
	var doc any
	decoded := false
	for _, t := range def.templates {
		for _, f := range []struct {
			name string
			tpl  *store.FlowTemplate
		}{{"concurrency", t.Concurrency}, {"rate limit", t.RateLimit}} {
			if f.tpl == nil || len(f.tpl.Path) == 0 {
				continue
			}
			if !decoded {
				if err := json.Unmarshal(input, &doc); err != nil {
					return fmt.Errorf("%w: input: %w", ErrInvalidInput, err)
				}
				decoded = true
			}
			v := doc
			for _, p := range f.tpl.Path {
				m, ok := v.(map[string]any)
				if !ok {
					v = nil
					break
				}
				v = m[p]
			}
			if v == nil {
				return fmt.Errorf("%w: input: task %q: no value at %q for its %s key", ErrInvalidInput, t.Name, strings.Join(f.tpl.Path, "."), f.name)
			}
		}
	}
	return nil
}
