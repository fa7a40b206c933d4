package producer

import (
	"time"

	"github.com/cairnhq/cairn/store"
)

// Queues are an engine's queues by name. A claim may take tasks of
// several (a completion write claiming along, a park write): its
// parameters and what it found are read and recorded here.
type Queues[E any] map[string]*Queue[E]

// ClaimParams asks for limits[i] tasks of queues[i] for worker with
// lease, keyed (with each queue's turn) when keyed.
func (qs Queues[E]) ClaimParams(worker int64, lease time.Duration, keyed bool, queues []*Queue[E], limits []int) store.ClaimParams {
	p := store.ClaimParams{WorkerID: worker, Limits: limits, Lease: lease, Keyed: keyed}
	for _, q := range queues {
		p.Queues = append(p.Queues, q.Name)
	}
	if p.Keyed {
		p.After = qs.Turns(p.Queues)
		p.KeyedFloors = qs.KeyedFloors(p.Queues)
	}
	p.Floors = qs.Floors(p.Queues)
	return p
}

// KeyedFloors are the keyed floors of queues (see KeyedFloor).
func (qs Queues[E]) KeyedFloors(queues []string) map[string]time.Time {
	return byQueue(qs, queues, func(q *Queue[E]) (time.Time, bool) { f := q.KeyedFloor.Get(); return f, !f.IsZero() })
}

// Floors are the claim floors of queues (see Floor).
func (qs Queues[E]) Floors(queues []string) map[string]store.ClaimFloor {
	return byQueue(qs, queues, func(q *Queue[E]) (store.ClaimFloor, bool) { f := q.Floor.Get(); return f, !f.At.IsZero() })
}

// byQueue maps each of queues for which get reports a value to it (nil:
// none does).
func byQueue[E, T any](qs Queues[E], queues []string, get func(*Queue[E]) (T, bool)) map[string]T {
	var m map[string]T
	for _, name := range queues {
		if q := qs[name]; q != nil {
			if v, ok := get(q); ok {
				if m == nil {
					m = make(map[string]T, len(queues))
				}
				m[name] = v
			}
		}
	}
	return m
}

// AfterClaim records what a claim asked as p took: each queue's turn
// across keys moves past the keys a keyed claim visited, and each
// queue's floor up to the lowest unkeyed task the claim took (keyed tasks
// come from another index and say nothing of it; a keyed claim takes a
// prefix, in claim order, of the unkeyed tasks it scanned, so its lowest
// is the lowest there was). A claim that failed (err) puts its queues'
// floors back to the start: what it had locked may be below them once it
// rolled back.
func (qs Queues[E]) AfterClaim(p store.ClaimParams, claimed []store.Claimed, err error) {
	if err != nil {
		for _, name := range p.Queues {
			if q := qs[name]; q != nil {
				q.Floor.Reset()
				q.KeyedFloor.Reset()
			}
		}
		return
	}
	var lowest map[string]store.ClaimFloor
	for _, c := range claimed {
		q := qs[c.Queue]
		if q == nil {
			continue
		}
		if c.AfterKey != nil {
			q.After.Store(c.AfterKey)
		}
		if c.ConcKey != nil || c.RateKey != nil {
			continue
		}
		f := store.ClaimFloor{Priority: c.Priority, At: c.AvailableAt}
		if lowest == nil {
			lowest = map[string]store.ClaimFloor{}
		}
		if l, ok := lowest[c.Queue]; !ok || FloorBelow(f, l) {
			lowest[c.Queue] = f
		}
	}
	for name, f := range lowest {
		qs[name].Floor.Raise(p.Floors[name], f)
	}
}

// Turns returns the keyed-claim turn of each named queue.
func (qs Queues[E]) Turns(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if q := qs[n]; q != nil {
			if a := q.After.Load(); a != nil {
				out[n] = *a
			}
		}
	}
	return out
}

// Held counts the slots held across queues: handlers running plus
// finished ones whose write has not committed.
func (qs Queues[E]) Held() int {
	n := 0
	for _, q := range qs {
		n += q.Size - q.Slots.Available()
	}
	return n
}
