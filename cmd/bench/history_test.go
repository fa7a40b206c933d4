package main

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{1.23, 0.94, 1.02}, 1.02},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Errorf("median reordered its input: %v, was %v", c.xs, in)
			}
		}
	}
}

func TestClaimHistPlus(t *testing.T) {
	t.Parallel()
	bounds := []float64{0.001, 0.002, math.Inf(1)}
	a := claimHist{bounds: bounds, counts: []uint64{1, 3, 4}}
	b := claimHist{bounds: bounds, counts: []uint64{0, 10, 10}}
	sum := a.plus(b)
	if sum.n() != 14 || sum.counts[0] != 1 || sum.counts[1] != 13 {
		t.Fatalf("a + b = %v, want [1 13 14]", sum.counts)
	}
	if got := (claimHist{}).plus(a); got.n() != 4 {
		t.Errorf("empty + a = %v claims, want 4", got.n())
	}
	if got := a.plus(claimHist{}); got.n() != 4 {
		t.Errorf("a + empty = %v claims, want 4", got.n())
	}
	if a.counts[1] != 3 {
		t.Errorf("plus changed its receiver: %v", a.counts)
	}
}
