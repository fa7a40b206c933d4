package define

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// Version returns what workflow_versions stores of a registered workflow
// (see store.WorkflowVersion): its definition (described, the engine's
// WorkflowDef), its templates, its version and the earlier versions it
// serves. The version is version when given, else a content hash of the
// definition: "h" and 12 hex digits of the SHA-256 of its JSON (fields in
// declaration order, map keys sorted), so that any change the Workflows
// page shows (a task, a dependency, a retry policy, a queue, a limit)
// makes a new version. Versions are names (1-64 of A-Z a-z 0-9 _ . : -);
// compatible may not name the version itself.
func (r Rules) Version(workflow, version string, compatible []string, described any, templates []store.TaskTemplate) (store.WorkflowVersion, error) {
	bad := func(format string, args ...any) (store.WorkflowVersion, error) {
		return store.WorkflowVersion{}, fmt.Errorf("%w %q: %s", r.ErrInvalidWorkflow, workflow, fmt.Sprintf(format, args...))
	}
	def, err := json.Marshal(described)
	if err != nil {
		return bad("definition: %v", err)
	}
	tpl, err := json.Marshal(templates)
	if err != nil {
		return bad("templates: %v", err)
	}
	if version == "" {
		sum := sha256.Sum256(def)
		version = "h" + hex.EncodeToString(sum[:6])
	} else if check.Name(version) != nil {
		return bad("version %q must be 1-64 of A-Z a-z 0-9 _ . : -", version)
	}
	for _, c := range compatible {
		if check.Name(c) != nil {
			return bad("compatible version %q must be 1-64 of A-Z a-z 0-9 _ . : -", c)
		}
		if c == version {
			return bad("compatible names its own version %q", c)
		}
	}
	return store.WorkflowVersion{Workflow: workflow, Version: version, Definition: def, Templates: tpl,
		Compatible: slices.Clone(compatible)}, nil
}

// Served returns the "workflow@version" names a worker that registered v
// serves: its own version and the compatible ones.
func Served(v store.WorkflowVersion) []string {
	out := []string{v.Workflow + "@" + v.Version}
	for _, c := range v.Compatible {
		out = append(out, v.Workflow+"@"+c)
	}
	return out
}

// Stored reads the runs of workflows this process did not register from
// workflow_versions, each once: of its most recently registered version.
type Stored struct {
	// Read reads a workflow's latest version (store.ErrNotFound: none).
	Read func(ctx context.Context, workflow string) (*store.WorkflowVersion, error)
	// Known returns the registered workflows, which the error of an
	// unknown one names.
	Known func() []string
	runs  map[string]Run
}

// StoredRun returns a Run of workflow, which this process did not
// register, from its stored version (see Stored); ErrUnknownWorkflow
// when none is stored. The caller sets Input and Options.
func (r Rules) StoredRun(ctx context.Context, s *Stored, workflow string) (Run, error) {
	if run, ok := s.runs[workflow]; ok {
		return run, nil
	}
	v, err := s.Read(ctx, workflow)
	if errors.Is(err, store.ErrNotFound) {
		return Run{}, r.UnknownWorkflow(workflow, s.Known())
	} else if err != nil {
		return Run{}, err
	}
	run, err := storedRun(v)
	if err != nil {
		return Run{}, err
	}
	if s.runs == nil {
		s.runs = map[string]Run{}
	}
	s.runs[workflow] = run
	return run, nil
}

// storedRun is the Run of stored version v: its templates and its
// definition's queue.
func storedRun(v *store.WorkflowVersion) (Run, error) {
	run := Run{Workflow: v.Workflow, Version: v.Version}
	var def struct{ Queue string }
	if err := json.Unmarshal(v.Definition, &def); err != nil {
		return Run{}, fmt.Errorf("workflow %q version %q: stored definition: %w", v.Workflow, v.Version, err)
	}
	if err := json.Unmarshal(v.Templates, &run.Templates); err != nil {
		return Run{}, fmt.Errorf("workflow %q version %q: stored templates: %w", v.Workflow, v.Version, err)
	}
	run.Queue = def.Queue
	for _, t := range run.Templates {
		run.Keyed = run.Keyed || t.Concurrency != nil || t.RateLimit != nil
	}
	return run, nil
}
