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
	w := New(Config[string]{Max: 10, Write: func(b []string) { written <- slices.Clone(b) }}) // batches are reused
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

// With Key, a request whose key is in a batch being written waits for
// that write and goes in a later batch; other keys are not held back,
// and Writing counts the requests being written.
func TestRequestOfAKeyBeingWrittenWaitsForThatWrite(t *testing.T) {
	t.Parallel()
	type req struct {
		key int64
		n   int
	}
	writes := make(chan []req, 10)
	release := make(chan struct{})
	w := New(Config[req]{Max: 10, Writers: 2, Key: func(r req) int64 { return r.key },
		Write: func(b []req) {
			writes <- slices.Clone(b) // batches are reused
			if b[0].n == 1 {
				<-release // the first write stays in flight
			}
		}})
	go w.Run()
	defer w.Close()
	next := func() []req {
		t.Helper()
		select {
		case b := <-writes:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no write")
			return nil
		}
	}
	if err := w.Submit(req{key: 7, n: 1}); err != nil {
		t.Fatal(err)
	}
	if b := next(); len(b) != 1 || b[0].n != 1 {
		t.Fatalf("first write %v", b)
	}
	if got := w.Writing(); got != 1 {
		t.Fatalf("Writing() = %d while the first write is in flight, want 1", got)
	}
	// Key 7 is being written: its second request waits; key 8 goes.
	if err := w.Submit(req{key: 7, n: 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.Submit(req{key: 8, n: 3}); err != nil {
		t.Fatal(err)
	}
	for b := next(); ; b = next() {
		for _, r := range b {
			if r.n == 2 {
				t.Fatalf("request of key 7 written %v while key 7's write was in flight", b)
			}
		}
		if slices.ContainsFunc(b, func(r req) bool { return r.n == 3 }) {
			break
		}
	}
	close(release)
	if b := next(); len(b) != 1 || b[0].n != 2 {
		t.Fatalf("after key 7's write: %v, want its held request", b)
	}
}

// Close writes held requests too, without waiting for a wake.
func TestCloseWritesHeldRequests(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []int
	release := make(chan struct{})
	first := make(chan struct{})
	w := New(Config[int]{Max: 10, Writers: 2, Key: func(int) int64 { return 1 },
		Write: func(b []int) {
			if b[0] == 0 {
				close(first)
				<-release
			}
			mu.Lock()
			got = append(got, b...)
			mu.Unlock()
		}})
	go w.Run()
	if err := w.Submit(0); err != nil {
		t.Fatal(err)
	}
	<-first
	for i := 1; i <= 3; i++ {
		if err := w.Submit(i); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("wrote %v, want 0 1 2 3", got)
	}
}

// Start and Stop are a service's: Start runs the loop once, Stop writes
// what was submitted and is safe twice; a Stop before any Start refuses
// later submits and a Start after it runs nothing.
func TestStartAndStopAreAServicesLifecycle(t *testing.T) {
	t.Parallel()
	written := make(chan int, 10)
	w := New(Config[int]{Max: 4, Clock: time.Now, Write: func(b []int) {
		for _, r := range b {
			written <- r
		}
	}})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = w.Start(t.Context()) // a second Start does nothing
	if err := w.Submit(7); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop()
	if got := <-written; got != 7 {
		t.Fatalf("written %d, want 7", got)
	}
	if err := w.Submit(8); err != ErrClosed {
		t.Fatalf("submit after Stop: %v, want ErrClosed", err)
	}

	never := New(Config[int]{Max: 4, Clock: time.Now, Write: func([]int) { t.Error("a stopped writer wrote") }})
	never.Stop()
	_ = never.Start(t.Context())
	if err := never.Submit(1); err != ErrClosed {
		t.Fatalf("submit after a Stop before Start: %v, want ErrClosed", err)
	}
	never.Stop()
}
