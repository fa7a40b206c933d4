// Package backoff paces the engine's loops while their database calls
// fail: a jittered, growing wait per loop (Backoff), and one shared
// tracker (Health) that turns the failures of every loop into a few log
// lines and wakes the waiting loops when the database answers again.
package backoff

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Pacing of the engine's loops (claimers, completion writer, background
// services) while their database calls fail: the n-th failure in a row
// waits a random time in [d/2, d), d = min(retryMin·2^(n-1), retryMax).
// The first success resets it.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
	// errorLogEvery is how often a loop whose calls keep failing with an
	// error other than an unreachable database logs it again.
	errorLogEvery = time.Minute
)

// Backoff is the wait of one loop between failed database calls. It is
// not safe for concurrent use: each loop goroutine keeps its own.
type Backoff struct {
	min, max time.Duration
	rand     func() float64 // in [0, 1)
	fails    int
}

// New returns a Backoff whose jitter draws from rand, a source of
// numbers in [0, 1) such as math/rand/v2.Float64.
func New(rand func() float64) *Backoff {
	return &Backoff{min: retryMin, max: retryMax, rand: rand}
}

// Next counts one more failure and returns how long to wait before the
// next try.
func (b *Backoff) Next() time.Duration {
	d := b.max
	if b.fails < 32 {
		if s := b.min << b.fails; s > 0 && s < b.max {
			d = s
		}
	}
	b.fails++
	return d/2 + time.Duration(b.rand()*float64(d/2))
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.fails = 0 }

// Health turns the database errors of the engine's loops into a few
// log lines. The first loop to find the database unreachable logs WARN
// "database unreachable"; the others join that outage silently. The first
// of them to get through again logs INFO "database back" (how long, how
// many failed tries in all) and wakes every loop waiting out a backoff, so
// the rest retry at once. Other errors (a failing statement) are a loop's
// own: logged when they start, then at most every errorLogEvery.
type Health struct {
	log   *slog.Logger
	clock func() time.Time

	mu    sync.Mutex
	down  bool
	epoch int // counts outages; a loop's failure joins the current one
	since time.Time
	tries int           // failed tries of every loop since down
	retry chan struct{} // closed and replaced when the database is back
	loops map[string]*Loop
}

// NewHealth returns a tracker that logs to log and reads the time from
// clock.
func NewHealth(log *slog.Logger, clock func() time.Time) *Health {
	return &Health{log: log, clock: clock, retry: make(chan struct{}), loops: map[string]*Loop{}}
}

// Logger returns the logger h logs to, for the lines of a loop that are
// not about the database's health (a write set apart, logged once).
func (h *Health) Logger() *slog.Logger { return h.log }

// Loop returns the tracker of the loop called name, made on first use;
// goroutines of one loop (a queue's claimers) share it.
func (h *Health) Loop(name string) *Loop {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.loops[name]
	if !ok {
		l = &Loop{h: h, name: name}
		h.loops[name] = l
	}
	return l
}

// FailedTries returns how many calls of the loop called name have failed
// since h was made; with name "" those of every loop.
func (h *Health) FailedTries(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == "" {
		var n int64
		for _, l := range h.loops {
			n += l.total.Load()
		}
		return n
	}
	if l := h.loops[name]; l != nil {
		return l.total.Load()
	}
	return 0
}

// Nudge makes every loop waiting out a backoff retry now: something says
// the database answers again (the LISTEN connection is back).
func (h *Health) Nudge() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.retry)
	h.retry = make(chan struct{})
}

// retryChan returns the channel closed when the database is next back.
func (h *Health) retryChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.retry
}

// Wait waits d, or less when the database is back. It returns false,
// at once, when ctx is done or stop is closed.
func (h *Health) Wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	retry := h.retryChan()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-t.C:
	case <-retry:
	}
	return true
}

// Loop is one loop's part of Health.
type Loop struct {
	h       *Health
	name    string
	total   atomic.Int64 // failed tries ever
	failing atomic.Bool  // the last try failed (read without mu on success)

	mu         sync.Mutex
	since      time.Time // first failure in a row
	tries      int       // failures in a row
	epoch      int       // the outage this loop's failures joined (0: none)
	errLogged  bool      // a statement error was logged in this run of failures
	lastLog    time.Time
	suppressed int
}

// Fail records a failed try of the loop and logs it if it changes the
// state (or, for statement errors, if the last line is errorLogEvery old).
func (l *Loop) Fail(ctx context.Context, err error) {
	h := l.h
	l.total.Add(1)
	now := h.clock()
	unreachable := store.IsUnavailable(err)

	h.mu.Lock()
	l.mu.Lock()
	if !l.failing.Load() {
		l.failing.Store(true)
		l.since, l.tries, l.epoch, l.errLogged, l.suppressed = now, 0, 0, false, 0
	}
	l.tries++
	startOutage := false
	if unreachable {
		switch {
		case h.down:
			h.tries++
			l.epoch = h.epoch
		case l.epoch != 0 && l.epoch == h.epoch:
			// This loop has not got through since the outage another loop
			// saw end: a stale connection, not a new outage.
		default:
			h.down, h.since, h.tries = true, now, 1
			h.epoch++
			l.epoch = h.epoch
			startOutage = true
		}
	}
	logErr := false
	suppressed := 0
	if !unreachable {
		if !l.errLogged || now.Sub(l.lastLog) >= errorLogEvery {
			logErr, suppressed = true, l.suppressed
			l.errLogged, l.lastLog, l.suppressed = true, now, 0
		} else {
			l.suppressed++
		}
	}
	tries := l.tries
	l.mu.Unlock()
	h.mu.Unlock()

	switch {
	case startOutage:
		h.log.WarnContext(ctx, "database unreachable", slog.String("loop", l.name), slog.Any("error", err))
	case logErr:
		h.log.WarnContext(ctx, "database call failed", slog.String("loop", l.name), slog.Int("tries", tries),
			slog.Int("not_logged", suppressed), slog.Any("error", err))
	}
}

// OK records a successful try of the loop. While the loop is not failing
// it costs an atomic load.
func (l *Loop) OK(ctx context.Context) {
	if !l.failing.Load() {
		return
	}
	h := l.h
	now := h.clock()
	h.mu.Lock()
	l.mu.Lock()
	if !l.failing.Load() { // another goroutine of the loop got there first
		l.mu.Unlock()
		h.mu.Unlock()
		return
	}
	l.failing.Store(false)
	back := h.down && l.epoch == h.epoch
	var downFor time.Duration
	var outageTries int
	if back {
		h.down = false
		downFor, outageTries = now.Sub(h.since), h.tries
		close(h.retry)
		h.retry = make(chan struct{})
	}
	errLogged, failedFor, tries := l.errLogged, now.Sub(l.since), l.tries
	l.mu.Unlock()
	h.mu.Unlock()

	if back {
		h.log.InfoContext(ctx, "database back", slog.String("loop", l.name),
			slog.Duration("down_for", downFor.Round(time.Millisecond)), slog.Int("tries", outageTries))
	}
	if errLogged {
		h.log.InfoContext(ctx, "database calls succeed again", slog.String("loop", l.name),
			slog.Duration("failed_for", failedFor.Round(time.Millisecond)), slog.Int("tries", tries))
	}
}
