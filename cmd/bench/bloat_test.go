package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClaimHistQuantile(t *testing.T) {
	t.Parallel()
	// Buckets ≤ 1 ms, ≤ 2 ms, ≤ 4 ms, +Inf; cumulative counts.
	earlier := claimHist{bounds: []float64{0.001, 0.002, 0.004, math.Inf(1)}, counts: []uint64{10, 10, 10, 10}}
	now := claimHist{bounds: earlier.bounds, counts: []uint64{10, 60, 110, 110}}
	d := now.since(earlier)
	if d.n() != 100 {
		t.Fatalf("claims since = %d, want 100", d.n())
	}
	// 50 claims in (1, 2] ms, 50 in (2, 4] ms: the median is 2 ms, the
	// 99th percentile 98% of the way through (2, 4].
	if got := d.quantile(0.5); got != 2*time.Millisecond {
		t.Errorf("p50 = %s, want 2ms", got)
	}
	if got, want := d.quantile(0.99), time.Duration(3.96*float64(time.Millisecond)); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("p99 = %s, want %s", got, want)
	}
	// Past the last finite bound: that bound.
	over := claimHist{bounds: earlier.bounds, counts: []uint64{0, 0, 1, 100}}
	if got := over.quantile(0.99); got != 4*time.Millisecond {
		t.Errorf("p99 in +Inf = %s, want 4ms", got)
	}
	// Claims over 2 ms (the bucket bound at or below 3 ms): the one in
	// (2, 4] ms and the 99 past 4 ms.
	if n, bound := over.over(3 * time.Millisecond); n != 100 || bound != 2*time.Millisecond {
		t.Errorf("over 3ms = %d over %s, want 100 over 2ms", n, bound)
	}
	if got := (claimHist{}).p99(); got != "no claims" {
		t.Errorf("empty p99 = %q", got)
	}
}

// The held span's claims less those of the bench's reads inside it:
// each read's window (a difference) is summed with plus, from nothing,
// and taken out with since.
func TestClaimHistLeavesOutTheReads(t *testing.T) {
	t.Parallel()
	bounds := []float64{0.001, 0.05, math.Inf(1)}
	at := func(fast, slow uint64) claimHist { // cumulative: fast ≤ 1 ms, slow > 50 ms
		return claimHist{bounds: bounds, counts: []uint64{fast, fast, fast + slow}}
	}
	hold, release := at(100, 1), at(1100, 31)
	var reads claimHist
	reads = reads.plus(at(400, 5).since(at(390, 1))) // a read: 10 fast, 4 slow
	reads = reads.plus(at(800, 20).since(at(795, 10)))
	held := release.since(hold).since(reads)
	if held.n() != 1000+30-15-14 {
		t.Fatalf("held claims = %d, want %d", held.n(), 1000+30-15-14)
	}
	if n, _ := held.over(slowClaim); n != 30-14 {
		t.Errorf("slow held claims = %d, want %d", n, 30-14)
	}
	if got := release.since(hold).since(claimHist{}); got.n() != 1030 {
		t.Errorf("with no reads: %d claims, want 1030", got.n())
	}
}

func TestBloatRecovered(t *testing.T) {
	t.Parallel()
	// 1000/s before the hold at 10 s, 500/s while held to 20 s, then
	// 1000/s again; dead tuples peak at 300 before, climb while held and
	// fall to 200 at 27 s (autovacuum).
	var samples []bloatSample
	done := int64(0)
	for s := 1; s <= 40; s++ {
		rate := int64(1000)
		if s > 10 && s <= 20 {
			rate = 500
		}
		done += rate
		dead := int64(s * 30)
		if s > 10 {
			dead = int64(s * 100)
		}
		if s >= 27 {
			dead = 200
		}
		samples = append(samples, bloatSample{at: time.Duration(s) * time.Second, done: done, dead: dead})
	}
	before := bloatBefore(samples, 10*time.Second)
	if before.rate != 1000 || before.dead != 300 {
		t.Fatalf("before = %+v, want 1000/s and 300 dead", before)
	}
	r := bloatRecovered(samples, 10*time.Second, 20*time.Second)
	if !r.done {
		t.Fatalf("not recovered: %+v", r)
	}
	// The trailing 5-second window is back to ≥ 950/s once it holds at
	// most one second at 500/s: (4×1000 + 500)/5 = 900 at 24 s, 1000 at 25 s.
	if r.rateAt != 5*time.Second {
		t.Errorf("throughput recovered after %s, want 5s", r.rateAt)
	}
	if r.deadAt != 7*time.Second {
		t.Errorf("dead tuples recovered after %s, want 7s", r.deadAt)
	}
	if r.at() != 7*time.Second {
		t.Errorf("recovered after %s, want 7s", r.at())
	}
	// Cut before the dead tuples fall: not recovered.
	if r := bloatRecovered(samples[:25], 10*time.Second, 20*time.Second); r.done || !r.rateOK || r.deadOK {
		t.Errorf("cut at 25 s: %+v, want throughput only", r)
	}
}

// With -bloat-keys the scenario's task is flow-controlled, by a limit as
// large as the slots, and its runs take the tenants in turn; without, it
// is the plain no-op task with no input.
func TestBloatWorkflowKeys(t *testing.T) {
	b := &bench{o: options{slots: 64}}
	wf, input := b.bloatWorkflow(nil)
	require.Nil(t, wf.Tasks[0].Concurrency)
	require.Nil(t, input)

	b.o.bloatKeys = 3
	wf, input = b.bloatWorkflow(nil)
	require.NotNil(t, wf.Tasks[0].Concurrency)
	require.Equal(t, "tenant", wf.Tasks[0].Concurrency.Key)
	require.Equal(t, 64, wf.Tasks[0].Concurrency.Max)
	var got []any
	for i := range int64(4) {
		got = append(got, input(i))
	}
	require.Equal(t, []any{map[string]string{"tenant": "t0"}, map[string]string{"tenant": "t1"},
		map[string]string{"tenant": "t2"}, map[string]string{"tenant": "t0"}}, got)
}
