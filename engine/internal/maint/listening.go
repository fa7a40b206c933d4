package maint

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// Event listener registration: statements announce transitions on the
// events channel only while some process has a row in event_listeners
// (see store.EventListenerKeep), so an engine with subscribers keeps one.
const (
	// ListenTTL is how long a kept row lasts: a process that dies stops
	// the announcing at most this long after.
	ListenTTL = time.Minute
	// listenEvery is how often the row is renewed (and dropped once no
	// subscriber is left).
	listenEvery = 10 * time.Second
)

// ListeningStore is what the registration needs of the store.
type ListeningStore interface {
	EventListenerKeep(ctx context.Context, holder string, ttl time.Duration) error
	EventListenerDrop(ctx context.Context, holder string) error
}

// Listening keeps this engine's row in event_listeners while Want
// reports subscribers, and drops it when none is left. RunOnce is also
// called directly by Subscribe, so that the transitions committed after
// Subscribe returns are announced.
type Listening struct {
	*Service
	st     ListeningStore
	holder string
	want   func() bool
	log    *slog.Logger

	mu   sync.Mutex
	kept bool // the row was written and not dropped since
}

// NewListening returns the registration service of holder (unique to
// this engine) called "listening"; want reports whether the engine has
// subscribers to events.
func NewListening(st ListeningStore, holder string, want func() bool, log *slog.Logger, health *backoff.Health) *Listening {
	l := &Listening{st: st, holder: holder, want: want, log: log}
	l.Service = NewService("listening", listenEvery, health, l.RunOnce)
	return l
}

// RunOnce writes or renews the row when there are subscribers, and
// drops it when there are none.
func (l *Listening) RunOnce(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.want():
		if err := l.st.EventListenerKeep(ctx, l.holder, ListenTTL); err != nil {
			return err
		}
		if !l.kept {
			l.log.InfoContext(ctx, "events announced: this engine has subscribers", slog.String("holder", l.holder))
		}
		l.kept = true
	case l.kept:
		return l.drop(ctx)
	}
	return nil
}

// Release drops the row, if kept (at shutdown).
func (l *Listening) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.kept {
		return nil
	}
	return l.drop(ctx)
}

func (l *Listening) drop(ctx context.Context) error {
	if err := l.st.EventListenerDrop(ctx, l.holder); err != nil {
		return err
	}
	l.kept = false
	l.log.InfoContext(ctx, "events no longer announced for this engine: no subscriber left", slog.String("holder", l.holder))
	return nil
}
