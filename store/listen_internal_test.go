package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestListenJitterIsUpToHalfOfTheWait(t *testing.T) {
	t.Parallel()
	waits := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	for i, w := range waits {
		require.Equal(t, time.Duration(0), listenJitter(i+1, 0), "attempt %d", i+1)
		require.Equal(t, w/4, listenJitter(i+1, 0.5), "attempt %d", i+1)
		require.Less(t, listenJitter(i+1, 0.999999), w/2, "attempt %d", i+1)
	}
	require.Equal(t, listenRetryMax/4, listenJitter(1000, 0.5), "no overflow however long the outage")
}
