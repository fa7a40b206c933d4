package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// WorkflowVersionState is one version of a workflow as registered (a
// row of workflow_versions) and as the deploy stands (its row of the
// view cairn_workflow_versions).
type WorkflowVersionState struct {
	Workflow string `bun:"workflow"`
	Version  string `bun:"version"`
	// Definition is the workflow as its registering engine described it
	// (engine.WorkflowDef as JSON).
	Definition   json.RawMessage `bun:"definition,type:jsonb"`
	Compatible   []string        `bun:"compatible,array"`
	RegisteredAt time.Time       `bun:"registered_at"`
	SeenAt       time.Time       `bun:"seen_at"`
	// Its runs in flight by status, and their sum.
	Pending     int64 `bun:"pending"`
	Running     int64 `bun:"running"`
	Paused      int64 `bun:"paused"`
	Interrupted int64 `bun:"interrupted"`
	InFlight    int64 `bun:"in_flight"`
	// Workers counts the live workers that serve it; WorkerNames are
	// theirs ("name #id"), by id.
	Workers     int64    `bun:"workers"`
	WorkerNames []string `bun:"worker_names,array"`
	// Newest is the version registered last; Retirable an older one with
	// no run in flight: its workers can go.
	Newest    bool `bun:"newest"`
	Retirable bool `bun:"retirable"`
}

// WorkflowVersionList returns the stored versions of every workflow, or
// of one when workflow is not "", by workflow and newest first, with the
// deploy's counts of cairn_workflow_versions (read without JIT, like
// every list over runs).
func (s *Store) WorkflowVersionList(ctx context.Context, workflow string) ([]WorkflowVersionState, error) {
	out := []WorkflowVersionState{}
	err := s.scanWithoutJIT(ctx, &out, `SELECT v.workflow, v.version, d.definition, v.compatible, v.registered_at, v.seen_at,
	v.pending, v.running, v.paused, v.interrupted, v.in_flight,
	v.workers, v.worker_names, v.newest, v.retirable
FROM ?schema.cairn_workflow_versions v
JOIN ?schema.workflow_versions d ON (d.workflow, d.version) = (v.workflow, v.version)
WHERE ? = '' OR v.workflow = ?
ORDER BY v.workflow, v.registered_at DESC, v.version DESC`, workflow, workflow)
	if err != nil {
		return nil, fmt.Errorf("list workflow versions: %w", err)
	}
	return out, nil
}

// WorkflowNameList returns the names of the workflows with a stored
// version, sorted.
func (s *Store) WorkflowNameList(ctx context.Context) ([]string, error) {
	out := []string{}
	err := s.raw(`SELECT DISTINCT workflow FROM ?schema.workflow_versions ORDER BY workflow`).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return out, nil
}
