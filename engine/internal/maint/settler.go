package maint

import (
	"context"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

// settleEvery is the time between two looks at what cancels from SQL left
// to the engines.
const settleEvery = time.Second

// settleBatch is how many rows of pending_settles one look takes.
const settleBatch = 100

// SettlerStore is what the settler needs of the store.
type SettlerStore interface {
	PendingSettleTake(ctx context.Context, limit int) (moved []store.Moved, taken int, err error)
}

// Settler decides what a cancel_run from SQL left to the engines
// (pending_settles, migration 035): the roots of the runs that waited for
// the cancelled runs (WithAfter), whose trigger rules only the engine
// evaluates. Every engine runs one; rows another engine is taking are
// skipped, so running it twice is harmless. Its RunOnce takes what is
// there, batch after batch.
type Settler struct {
	*Service
	st      SettlerStore
	onMoves func(...[]store.Moved)
}

// NewSettler returns a settler service called "settler", run every
// second. onMoves, when set, is told the moves it made.
func NewSettler(st SettlerStore, health *backoff.Health, onMoves func(...[]store.Moved)) *Settler {
	s := &Settler{st: st, onMoves: onMoves}
	s.Service = NewService("settler", settleEvery, health, s.RunOnce)
	return s
}

// RunOnce settles every row pending_settles holds now.
func (s *Settler) RunOnce(ctx context.Context) error {
	for {
		moved, taken, err := s.st.PendingSettleTake(ctx, settleBatch)
		if err != nil {
			return err
		}
		if s.onMoves != nil && len(moved) > 0 {
			s.onMoves(moved)
		}
		if taken < settleBatch {
			return nil
		}
	}
}
