package define

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
)

// flowTemplates checks a task's flow-control declarations and returns
// them as stored on each new task.
func (r Rules) flowTemplates(wf string, t Task) (conc, rate *store.FlowTemplate, err error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: workflow %q task %q: %s: %s", r.ErrInvalidWorkflow, wf, t.Name, field, fmt.Sprintf(format, args...))
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
	if rl := t.RateLimit; rl != nil {
		if rl.Limit < 1 {
			return nil, nil, bad("RateLimit.Limit", "must be at least 1, got %d", rl.Limit)
		}
		if rl.Per < time.Millisecond {
			return nil, nil, bad("RateLimit.Per", "must be at least 1ms, got %s", rl.Per)
		}
		if rl.Group == "" && rl.Key != "" {
			return nil, nil, bad("RateLimit.Group", "must be set with a Key (%q): name the limit the tasks share", rl.Key)
		}
		g, err := group("RateLimit.Group", rl.Group)
		if err != nil {
			return nil, nil, err
		}
		p, err := path("RateLimit.Key", rl.Key)
		if err != nil {
			return nil, nil, err
		}
		rate = &store.FlowTemplate{Group: g, Path: p, Limit: rl.Limit, Per: rl.Per}
	}
	return conc, rate, nil
}

// checkFlowKeys returns ErrInvalidInput when the run input has no value at
// the key path of one of the limited tasks of templates.
func (r Rules) checkFlowKeys(templates []store.TaskTemplate, input json.RawMessage) error {
	var doc any
	decoded := false
	for _, t := range templates {
		for _, f := range []struct {
			name string
			tpl  *store.FlowTemplate
		}{{"concurrency", t.Concurrency}, {"rate limit", t.RateLimit}} {
			if f.tpl == nil || len(f.tpl.Path) == 0 {
				continue
			}
			if !decoded {
				if err := json.Unmarshal(input, &doc); err != nil {
					return fmt.Errorf("%w: input: %w", r.ErrInvalidInput, err)
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
				return fmt.Errorf("%w: input: task %q: no value at %q for its %s key", r.ErrInvalidInput, t.Name, strings.Join(f.tpl.Path, "."), f.name)
			}
		}
	}
	return nil
}
