package backoff

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffGrowsToCapAndResets(t *testing.T) {
	t.Parallel()
	// The shortest and the longest wait of each step: rand 0 and just
	// below 1 bound the jitter.
	lo := New(func() float64 { return 0 })
	hi := New(func() float64 { return 0.999999 })
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	for i, d := range want {
		require.Equal(t, d/2, lo.Next(), "step %d: shortest wait is half the step", i+1)
		h := hi.Next()
		require.Less(t, h, d, "step %d", i+1)
		require.Greater(t, h, d*99/100, "step %d", i+1)
	}
	for range 100 { // no overflow however long the outage
		require.Equal(t, retryMax/2, lo.Next())
	}
	lo.Reset()
	require.Equal(t, retryMin/2, lo.Next(), "a success starts over")
}

func TestBackoffJitterSpreadsWithinBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for range 200 {
		b := New(r.Float64)
		for range 5 {
			b.Next()
		}
		d := b.Next() // sixth failure: step retryMax
		require.GreaterOrEqual(t, d, retryMax/2)
		require.Less(t, d, retryMax)
		seen[d] = true
	}
	require.Greater(t, len(seen), 150, "waits of several engines must differ, not retry in step")
}

// logCounter counts log records by message.
type logCounter struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r)
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func (c *logCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.records {
		if r.Message == msg {
			n++
		}
	}
	return n
}

func (c *logCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

// attr returns attribute key of the last record with message msg.
func (c *logCounter) attr(msg, key string) slog.Value {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v slog.Value
	for _, r := range c.records {
		if r.Message == msg {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == key {
					v = a.Value
				}
				return true
			})
		}
	}
	return v
}

func TestDBHealthLogsOncePerOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &logCounter{}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := NewHealth(slog.New(logs), func() time.Time { return now })
	claim, heartbeat := h.Loop("claim:default"), h.Loop("heartbeat")
	refused := fmt.Errorf("claim tasks: %w", syscall.ECONNREFUSED)

	for range 100 {
		claim.Fail(ctx, refused)
		heartbeat.Fail(ctx, refused)
		now = now.Add(10 * time.Millisecond)
	}
	require.Equal(t, 1, logs.count("database unreachable"), "one line for the outage, not one per try or per loop")
	require.Equal(t, "claim:default", logs.attr("database unreachable", "loop").String())
	require.Equal(t, 1, logs.total())

	retry := h.retryChan()
	heartbeat.OK(ctx)
	require.Equal(t, 1, logs.count("database back"))
	require.Equal(t, int64(200), logs.attr("database back", "tries").Int64())
	require.Equal(t, time.Second, logs.attr("database back", "down_for").Duration())
	select {
	case <-retry:
	default:
		t.Fatal("the database being back must wake loops waiting out a backoff")
	}

	// The claim loop has not got through yet: its stale failure is part of
	// the outage that ended, not a new one.
	claim.Fail(ctx, refused)
	claim.OK(ctx)
	heartbeat.OK(ctx)
	require.Equal(t, 2, logs.total(), "recovering loops log nothing more")

	// A second outage is a new state change.
	heartbeat.Fail(ctx, refused)
	claim.Fail(ctx, refused)
	heartbeat.OK(ctx)
	require.Equal(t, 2, logs.count("database unreachable"))
	require.Equal(t, 2, logs.count("database back"))
	require.Equal(t, int64(2), logs.attr("database back", "tries").Int64())
	require.Equal(t, int64(102+101), h.Loop("claim:default").total.Load()+h.Loop("heartbeat").total.Load())
	require.Equal(t, int64(102), h.FailedTries("claim:default"))
	require.Equal(t, int64(102+101), h.FailedTries(""), "every loop's failed tries")
}

func TestDBHealthRateLimitsStatementErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &logCounter{}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := NewHealth(slog.New(logs), func() time.Time { return now })
	rescuer := h.Loop("rescuer")
	bug := errors.New(`pq: column "nope" does not exist`)

	for range 100 {
		rescuer.Fail(ctx, bug)
		now = now.Add(100 * time.Millisecond)
	}
	require.Equal(t, 0, logs.count("database unreachable"), "a failing statement is no outage")
	require.Equal(t, 1, logs.count("database call failed"), "logged when it starts")
	now = now.Add(errorLogEvery)
	rescuer.Fail(ctx, bug)
	require.Equal(t, 2, logs.count("database call failed"), "and again after errorLogEvery")
	require.Equal(t, int64(99), logs.attr("database call failed", "not_logged").Int64())
	rescuer.OK(ctx)
	require.Equal(t, 1, logs.count("database calls succeed again"))
	require.Equal(t, int64(101), logs.attr("database calls succeed again", "tries").Int64())
	require.Equal(t, 0, logs.count("database back"))
	require.Equal(t, 3, logs.total())
}

func TestDBHealthWaitEndsEarly(t *testing.T) {
	t.Parallel()
	h := NewHealth(slog.New(slog.DiscardHandler), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})

	done := make(chan bool)
	go func() { done <- h.Wait(ctx, stop, time.Hour) }()
	nudged := false
	for deadline := time.Now().Add(10 * time.Second); !nudged && time.Now().Before(deadline); {
		h.Nudge() // again until the waiter, which may not wait yet, sees one
		select {
		case ok := <-done:
			require.True(t, ok, "a nudge ends the wait: retry now")
			nudged = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.True(t, nudged, "a nudge ends the wait")

	go func() { done <- h.Wait(ctx, stop, time.Hour) }()
	close(stop)
	require.False(t, <-done, "stop ends the wait: give up")

	go func() { done <- h.Wait(ctx, nil, time.Hour) }()
	cancel()
	require.False(t, <-done, "a done context ends the wait: give up")
}
