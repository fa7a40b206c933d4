package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// Two keyed claims that start from the same turn at once take different
// keys: the second's walk passes over the key the first has taken,
// instead of stopping at it and finding its row locked.
func TestConcurrentKeyedClaimsTakeDifferentKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 100})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 100}
	var runs []store.RunInsertParams
	for k := range 4 {
		for range 10 {
			runs = append(runs, keyedTask("w", "default", fmt.Sprintf(`{"t": "k%d"}`, k), conc, nil))
		}
	}
	insertRuns(t, b, runs...)
	claim := func(st *store.Store) []store.Claimed {
		// 16 is one key's share: each walk stops after the first key it takes.
		c, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{16},
			Lease: time.Hour, Keyed: true})
		require.NoError(t, err)
		return c
	}
	keys := func(cs []store.Claimed) map[string]int {
		m := map[string]int{}
		for _, c := range cs {
			m[*c.ConcKey]++
		}
		return m
	}

	// The first claim's transaction stays open while the second runs.
	first := make(chan []store.Claimed)
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- b.st.InTx(ctx, func(tx *store.Store) error {
			first <- claim(tx)
			<-release
			return nil
		})
	}()
	a := <-first
	second := claim(b.st)
	close(release)
	require.NoError(t, <-done)

	ka, kb := keys(a), keys(second)
	require.Equal(t, map[string]int{store.FlowKey('c', "tenant", "k0"): 10}, ka, "the first claim: the first key's tasks")
	require.Equal(t, map[string]int{store.FlowKey('c', "tenant", "k1"): 10}, kb, "the second: the next key's, not none")
}
