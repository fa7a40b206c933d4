package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// This file holds the writes and the engine's read of workflow_versions
// (migration 029): each registered workflow's definition, by version.

// WorkflowVersion is one version of a workflow as workflow_versions
// stores it.
type WorkflowVersion struct {
	Workflow string `bun:"workflow" json:"workflow"`
	Version  string `bun:"version" json:"version"`
	// Definition is the workflow as the Workflows page shows it (the
	// engine's WorkflowDef as JSON).
	Definition json.RawMessage `bun:"definition,type:jsonb" json:"definition"`
	// Templates are the task templates a run of the version is created
	// from ([]TaskTemplate as JSON).
	Templates json.RawMessage `bun:"templates,type:jsonb" json:"templates"`
	// Compatible are the earlier versions whose runs its handlers serve.
	Compatible []string `bun:"compatible,array" json:"compatible"`
}

// WorkflowVersionSave stores vs (one row per workflow and version): a
// new version is inserted, a known one takes the definition, templates
// and compatible versions given and its seen_at moves to now.
func (s *Store) WorkflowVersionSave(ctx context.Context, vs []WorkflowVersion) error {
	if len(vs) == 0 {
		return nil
	}
	for i := range vs {
		vs[i].Compatible = nonNilStrings(vs[i].Compatible)
	}
	b, err := json.Marshal(vs)
	if err != nil {
		return err
	}
	if _, err := s.exec(ctx, `
INSERT INTO ?schema.workflow_versions AS w (workflow, version, definition, templates, compatible)
SELECT v.workflow, v.version, v.definition, v.templates, ARRAY(SELECT jsonb_array_elements_text(v.compatible))
FROM jsonb_to_recordset(?::jsonb) AS v(workflow text, version text, definition jsonb, templates jsonb, compatible jsonb)
ORDER BY v.workflow, v.version
ON CONFLICT (workflow, version) DO UPDATE SET definition = excluded.definition, templates = excluded.templates,
	compatible = excluded.compatible, seen_at = now()`, jsonArg(b)); err != nil {
		return fmt.Errorf("store workflow versions: %w", err)
	}
	return nil
}

// WorkflowVersionLatest returns the most recently registered version
// (seen_at) of workflow; ErrNotFound when none is stored.
func (s *Store) WorkflowVersionLatest(ctx context.Context, workflow string) (*WorkflowVersion, error) {
	var out []WorkflowVersion
	if err := s.raw(`SELECT workflow, version, definition, templates, compatible FROM ?schema.workflow_versions
WHERE workflow = ? ORDER BY seen_at DESC, registered_at DESC, version DESC LIMIT 1`, workflow).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("read workflow %q's latest version: %w", workflow, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("workflow %q: %w", workflow, ErrNotFound)
	}
	return &out[0], nil
}
