package producer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A claim that found the queue empty stays the last word on it until
// work is announced.
func TestQueueDrainedUntilPoked(t *testing.T) {
	q := NewQueue[int]("q", 4)
	before := q.Pokes.Load()
	q.ClaimEnded(before, true)
	since, ok := q.IsDrained()
	require.True(t, ok)
	require.Equal(t, before, since)
	q.Poke()
	_, ok = q.IsDrained()
	require.False(t, ok, "work announced since")
	q.ClaimEnded(q.Pokes.Load(), false)
	_, ok = q.IsDrained()
	require.False(t, ok)
}

func TestQueueClaimCap(t *testing.T) {
	require.Equal(t, 1, NewQueue[int]("q", 1).ClaimCap())
	require.Equal(t, 4, NewQueue[int]("q", 8).ClaimCap())
	require.Equal(t, 16, NewQueue[int]("q", 32).ClaimCap(), "one claimer: half the slots")
	require.Equal(t, 256, NewQueue[int]("q", 1024).ClaimCap(), "two claimers: a quarter")
}

// Stopping waits for the claim loops and the claims begun outside them;
// it is safe before the loops ran and twice.
func TestQueueStopAndWait(t *testing.T) {
	q := NewQueue[int]("q", 4)
	q.StopAndWait() // never started
	q.StopAndWait()
	require.False(t, q.BeginClaim(), "stopped: no claim begins")

	q = NewQueue[int]("q", 4)
	require.True(t, q.BeginClaim())
	ran := make(chan struct{})
	q.Go(func() { <-q.Done(); close(ran) })
	done := make(chan struct{})
	go func() { q.StopAndWait(); close(done) }()
	<-ran
	select {
	case <-done:
		t.Fatal("StopAndWait returned with a claim in flight")
	default:
	}
	q.EndClaim()
	<-done
}
