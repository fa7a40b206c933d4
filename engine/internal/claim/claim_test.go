package claim

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// A loop claims again at once while claims fill every slot asked, then
// waits for a wake-up; a failing claim is retried after a backoff, not
// at each wake-up; closing stop ends it.
func TestLoopClaimsWhileFullWaitsForWakeAndBacksOff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var failedAt, nextAt atomic.Int64 // unix nanos: a failed claim's return, the next claim's start
	results := make(chan [3]int, 16)  // asked, got, fail
	claimed := make(chan struct{}, 16)
	l := &Loop{Name: "claim:test", Poll: time.Hour, Health: backoff.NewHealth(slog.New(slog.DiscardHandler), time.Now),
		Claim: func(ctx context.Context) (int, int, error) {
			calls.Add(1)
			defer func() { claimed <- struct{}{} }()
			r := <-results
			if failedAt.Load() != 0 && nextAt.Load() == 0 {
				nextAt.Store(time.Now().UnixNano())
			}
			if r[2] == 1 {
				failedAt.Store(time.Now().UnixNano())
				return r[0], 0, errors.New("database down")
			}
			return r[0], r[1], nil
		},
		More: func(asked, got int) bool { return got == asked }}
	stop, wake := make(chan struct{}), make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(context.Background(), stop, wake) }()
	step := func(r [3]int) {
		t.Helper()
		results <- r
		select {
		case <-claimed:
		case <-time.After(10 * time.Second):
			t.Fatal("no claim")
		}
	}
	step([3]int{4, 4, 0}) // full: claims again at once
	step([3]int{4, 1, 0}) // found less: waits for a wake-up
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d claims, want 2", n)
	}
	wake <- struct{}{}
	step([3]int{4, 0, 1}) // fails: retried after a backoff, which a wake-up does not cut short
	wake <- struct{}{}
	step([3]int{4, 1, 0})
	// The first backoff is 50 to 100 ms (backoff.New), counted from the
	// failed claim's return.
	if waited := time.Duration(nextAt.Load() - failedAt.Load()); waited < 50*time.Millisecond {
		t.Fatalf("retried after %s: the backoff was skipped", waited)
	}
	step([3]int{4, 1, 0}) // the wake-up sent during the backoff
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("loop did not stop")
	}
}
