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
// so the overview and /metrics read a few rows. Its RunOnce folds the
// deltas written since the last fold.
type CountFolder struct{ statementService }

// NewCountFolder returns a count folder service called "counts", run
// every second.
func NewCountFolder(st CountFolderStore, health *backoff.Health) *CountFolder {
	return &CountFolder{newStatementService("counts", foldEvery, health, st.TaskCountsFold)}
}

// statementService is a service whose run is one store call, whose count
// (of rows folded, ranges summarized) it does not need.
type statementService struct {
	*Service
	call func(context.Context) (int64, error)
}

func newStatementService(name string, every time.Duration, health *backoff.Health,
	call func(context.Context) (int64, error)) statementService {
	s := statementService{call: call}
	s.Service = NewService(name, every, health, s.RunOnce)
	return s
}

// RunOnce makes the service's store call once.
func (s statementService) RunOnce(ctx context.Context) error {
	_, err := s.call(ctx)
	return err
}
