package maint

import (
	"context"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// foldEvery is the time between two folds of the task counts.
const foldEvery = time.Second

// CountFolderStore is what the count folder needs of the store.
type CountFolderStore interface {
	TaskCountsFold(ctx context.Context) (int64, error)
}

// CountFolder folds the task count deltas written by the tasks triggers,
// so the overview and /metrics read a few rows.
type CountFolder struct {
	*Service
	st CountFolderStore
}

// NewCountFolder returns a count folder service called "counts", run
// every second.
func NewCountFolder(st CountFolderStore, health *backoff.Health) *CountFolder {
	c := &CountFolder{st: st}
	c.Service = NewService("counts", foldEvery, health, c.RunOnce)
	return c
}

// RunOnce folds the deltas written since the last fold.
func (c *CountFolder) RunOnce(ctx context.Context) error {
	_, err := c.st.TaskCountsFold(ctx)
	return err
}
