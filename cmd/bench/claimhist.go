package main

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// claimMetric is the engine's histogram of claim statement times (a
// claim alone, or a completion batch that claims the next tasks in the
// same statement), in this process's default Prometheus registry.
const claimMetric = "cairn_claim_duration_seconds"

// claimHist is a reading of the claim histogram: cumulative counts per
// upper bound (seconds), the last bound +Inf.
type claimHist struct {
	bounds []float64
	counts []uint64
}

// readClaims reads the engine's claim histogram (empty before the first
// claim of the process).
func readClaims() claimHist {
	var h claimHist
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return h
	}
	for _, mf := range mfs {
		if mf.GetName() != claimMetric || len(mf.GetMetric()) == 0 {
			continue
		}
		hist := mf.GetMetric()[0].GetHistogram()
		for _, b := range hist.GetBucket() {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.counts = append(h.counts, b.GetCumulativeCount())
		}
		h.bounds = append(h.bounds, math.Inf(1))
		h.counts = append(h.counts, hist.GetSampleCount())
	}
	return h
}

// since returns the claims observed between an earlier reading and h.
func (h claimHist) since(earlier claimHist) claimHist {
	d := claimHist{bounds: h.bounds, counts: make([]uint64, len(h.counts))}
	for i, c := range h.counts {
		d.counts[i] = c
		if i < len(earlier.counts) {
			d.counts[i] -= earlier.counts[i]
		}
	}
	return d
}

// plus adds two differences (see since) of the same histogram; either
// may be empty.
func (h claimHist) plus(o claimHist) claimHist {
	if len(h.counts) == 0 {
		return o
	}
	if len(o.counts) == 0 {
		return h
	}
	d := claimHist{bounds: h.bounds, counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i] + o.counts[i]
	}
	return d
}

// n returns how many claims the reading holds.
func (h claimHist) n() uint64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear within the bucket that holds it. Past the last finite
// bound it returns that bound; with no claims, 0.
func (h claimHist) quantile(q float64) time.Duration {
	total := h.n()
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return secs(lower)
			}
			in := float64(c - below)
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / in
			}
			return secs(lower + (h.bounds[i]-lower)*frac)
		}
		lower, below = h.bounds[i], c
	}
	return secs(lower)
}

// slowClaim is the claim time the tail count of p99 is taken over: the
// bloat scenario's goal for the p99.
const slowClaim = 50 * time.Millisecond

// over returns how many claims took longer than the largest bucket bound
// at or below d, and that bound (0 with no such bound).
func (h claimHist) over(d time.Duration) (uint64, time.Duration) {
	for i := len(h.bounds) - 1; i >= 0; i-- {
		if !math.IsInf(h.bounds[i], 1) && secs(h.bounds[i]) <= d {
			return h.n() - h.counts[i], secs(h.bounds[i])
		}
	}
	return h.n(), 0
}

// p99 formats the 99th percentile with the number of claims it is over
// and how many took longer than slowClaim (to the bucket bound below it).
// The p99 depends on the whole population: claims that find nothing are
// fast, and fewer of them raise it though no claim got slower. The count
// of slow claims does not.
func (h claimHist) p99() string {
	if h.n() == 0 {
		return "no claims"
	}
	slow, bound := h.over(slowClaim)
	return fmt.Sprintf("%s (%d claims, %d over %s)", ms(h.quantile(0.99)), h.n(), slow, ms(bound))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
