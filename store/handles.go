package store

import (
	"context"
	"fmt"
)

// WorkerHandles is a live worker and the "workflow.task" names it runs.
type WorkerHandles struct {
	WorkerID int64          `bun:"id" json:"id"`
	Name     string         `bun:"name" json:"name"`
	Queues   map[string]int `bun:"queues,type:jsonb" json:"queues"`
	// Handles is nil for a worker that declared no routing: it runs any
	// task of its queues.
	Handles []string `bun:"handles,array" json:"handles"`
}

// WorkerHandlesList returns the running workers with their handles, by
// id. It reads the workers table only.
func (s *Store) WorkerHandlesList(ctx context.Context) ([]WorkerHandles, error) {
	var out []WorkerHandles
	err := s.raw(`SELECT id, name, queues, handles FROM ?schema.workers WHERE status = 'running' ORDER BY id`).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list worker handles: %w", err)
	}
	return out, nil
}
