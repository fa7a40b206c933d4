package batch

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// A burst submitted while More says more are coming is written in few
// batches of at most Max, every request exactly once; Close writes what
// is left and later submits are refused.
func TestBurstIsWrittenInBatchesOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	var got []int
	const n, max = 1000, 64
	w := New(Config[int]{Max: max, Writers: 2, Clock: time.Now,
		More: func(k int) bool { return true },
		Write: func(b []int) {
			mu.Lock()
			defer mu.Unlock()
			sizes = append(sizes, len(b))
			got = append(got, b...)
		}})
	go w.Run()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Submit(i); err != nil {
				t.Errorf("submit %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	w.Close()
	w.Close() // safe twice
	if err := w.Submit(-1); err != ErrClosed {
		t.Fatalf("submit after close: %v, want ErrClosed", err)
	}
	slices.Sort(got)
	if len(got) != n || got[0] != 0 || got[n-1] != n-1 || len(slices.Compact(got)) != n {
		t.Fatalf("wrote %d requests (want each of %d once)", len(got), n)
	}
	for _, s := range sizes {
		if s > max {
			t.Fatalf("a batch of %d, over Max %d", s, max)
		}
	}
	if len(sizes) > n/2 {
		t.Fatalf("%d batches for %d requests: not gathered", len(sizes), n)
	}
}

// Without More, a lone request is written at once, not held for Gather.
func TestLoneRequestIsNotHeld(t *testing.T) {
	t.Parallel()
	written := make(chan []string, 1)
	w := New(Config[string]{Max: 10, Write: func(b []string) { written <- b }})
	go w.Run()
	defer w.Close()
	if err := w.Submit("a"); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-written:
		if len(b) != 1 || b[0] != "a" {
			t.Fatalf("wrote %v", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not written")
	}
}
