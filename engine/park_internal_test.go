package engine

import (
	"testing"
	"time"
)

func TestWakeupsShareOneTimerAndStopOnRemove(t *testing.T) {
	t.Parallel()
	w := newWakeups(time.Now)
	defer w.stop()
	const n = 200
	chans := make([]chan struct{}, n)
	entries := make([]*wakeup, n)
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
		// Different intervals: the one timer serves each at its own pace.
		entries[i] = w.add(chans[i], time.Duration(1+i%5)*time.Millisecond)
	}
	if got := w.len(); got != n {
		t.Fatalf("waiting: %d, want %d", got, n)
	}
	// Every entry is woken, twice (the interval repeats).
	for round := range 2 {
		for i, ch := range chans {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("entry %d not woken in round %d", i, round)
			}
		}
	}
	for _, wk := range entries {
		w.remove(wk)
		w.remove(wk) // safe twice
	}
	if got := w.len(); got != 0 {
		t.Fatalf("waiting after remove: %d", got)
	}
	// Removed entries get no more wake-ups: drain what was sent before
	// the removal, then a fresh entry's wake-up (later than any tick of
	// the removed ones would be) finds the old channels empty.
	for _, ch := range chans {
		select {
		case <-ch:
		default:
		}
	}
	probe := make(chan struct{}, 1)
	pw := w.add(probe, 20*time.Millisecond)
	select {
	case <-probe:
	case <-time.After(10 * time.Second):
		t.Fatal("probe not woken")
	}
	w.remove(pw)
	for i, ch := range chans {
		select {
		case <-ch:
			t.Fatalf("entry %d woken after remove", i)
		default:
		}
	}
}

func TestRenewWithinLeavesMarginAtNextBeat(t *testing.T) {
	t.Parallel()
	cases := []struct{ lease, every, want time.Duration }{
		{30 * time.Second, 5 * time.Second, 20 * time.Second},
		{2 * time.Second, 200 * time.Millisecond, 1600 * time.Millisecond},
		{6 * time.Second, 5 * time.Second, 0}, // short lease: renew all
		{10 * time.Second, 3 * time.Second, 0},
	}
	for _, c := range cases {
		got := renewWithin(c.lease, c.every)
		if got != c.want {
			t.Errorf("renewWithin(%s, %s) = %s, want %s", c.lease, c.every, got, c.want)
		}
		if got != 0 && got-c.every < c.lease/2-c.every {
			t.Errorf("renewWithin(%s, %s) = %s leaves too little margin", c.lease, c.every, got)
		}
	}
}
