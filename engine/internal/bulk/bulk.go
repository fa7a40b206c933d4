// Package bulk runs an action on many runs in batches: each batch one
// transaction of the action, the outcome split into the runs it changed
// and the ones it skipped.
package bulk

import "slices"

// Result is the outcome of an action on many runs: Done are the runs it
// changed, Skipped the others asked for, each in id order.
type Result struct {
	Done, Skipped []int64
}

// Batches sorts and dedupes ids and calls fn with them size at a time;
// fn returns the runs it changed. It stops at fn's first error, the
// batches before it staying done (and in the result).
func Batches(ids []int64, size int, fn func(batch []int64) ([]int64, error)) (Result, error) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var res Result
	for start := 0; start < len(ids); start += size {
		batch := ids[start:min(start+size, len(ids))]
		done, err := fn(batch)
		if err != nil {
			return res, err
		}
		slices.Sort(done)
		for _, id := range batch {
			if _, ok := slices.BinarySearch(done, id); ok {
				res.Done = append(res.Done, id)
			} else {
				res.Skipped = append(res.Skipped, id)
			}
		}
	}
	return res, nil
}

// Distinct returns ids without repeats, in the order of their first
// appearance (reusing ids' array).
func Distinct(ids []int64) []int64 {
	out := ids[:0]
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
