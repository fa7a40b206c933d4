package slots

import (
	"context"
	"errors"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitersAreServedInOrderBeforeNewClaims(t *testing.T) {
	t.Parallel()
	woken := 0
	s := New[int](1, func() { woken++ })
	if got := s.TryAcquireUpTo(5); got != 1 {
		t.Fatalf("took %d of 1 free slot", got)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if _, err := s.AcquireFor(context.Background(), i); err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			order <- i
		}()
		waitFor(t, "waiter queued", func() bool { return s.Waiting() == i+1 })
	}
	if got := s.TryAcquireUpTo(1); got != 0 {
		t.Fatalf("a claim took a slot while %d wait", s.Waiting())
	}
	for want := range 3 {
		s.Release(1)
		if got := <-order; got != want {
			t.Fatalf("served waiter %d, want %d (FIFO)", got, want)
		}
	}
	if woken != 0 || s.Available() != 0 {
		t.Fatalf("slots left free: %d (onFree called %d times); all went to waiters", s.Available(), woken)
	}
	s.Release(1)
	if woken != 1 || s.Available() != 1 {
		t.Fatalf("a free slot: available %d, onFree %d; want 1 and 1", s.Available(), woken)
	}
}

func TestHandOffTakesOnlyWaitersWithAnItem(t *testing.T) {
	t.Parallel()
	s := New[string](0, nil)
	plain := make(chan error, 1)
	go func() { plain <- s.Acquire(context.Background()) }()
	waitFor(t, "plain waiter", func() bool { return s.Waiting() == 1 })
	if ws := s.HandOff(1); len(ws) != 0 {
		t.Fatalf("handed off a plain waiter")
	}
	s.Release(1)
	if err := <-plain; err != nil {
		t.Fatal(err)
	}

	type result struct {
		w   *Waiter[string]
		err error
	}
	got := make(chan result, 1)
	go func() { w, err := s.AcquireFor(context.Background(), "task 7"); got <- result{w, err} }()
	waitFor(t, "item waiter", func() bool { return s.Waiting() == 1 })
	ws := s.HandOff(3)
	if len(ws) != 1 || ws[0].Item != "task 7" {
		t.Fatalf("hand-off took %d waiters", len(ws))
	}
	lost := errors.New("lost")
	ws[0].Done(lost)
	r := <-got
	if r.err != nil || r.w == nil || !errors.Is(r.w.Err(), lost) {
		t.Fatalf("handed waiter got (%v, %v), want its hand-off with the write's outcome", r.w, r.err)
	}
}

func TestGivingUpPassesALateGrantOn(t *testing.T) {
	t.Parallel()
	s := New[int](0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.AcquireFor(ctx, 1); done <- err }()
	waitFor(t, "waiter", func() bool { return s.Waiting() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	s.Release(1)
	if s.Available() != 1 || s.Waiting() != 0 {
		t.Fatalf("available %d waiting %d: the slot must stay free, not go to a waiter that left", s.Available(), s.Waiting())
	}
}
