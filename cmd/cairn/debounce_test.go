package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunsEnqueueDebounce: runs enqueue --debounce twice gives one run with
// the second input; --singleton likewise.
func TestRunsEnqueueDebounce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, flags := range [][]string{{"--debounce", "d", "--wait", "1h", "--max-wait", "2h"}, {"--singleton", "s"}} {
		require.NoError(t, s.eng.PauseQueue(context.Background(), "default")) // the singleton run stays queued
		out := s.ok(t, append([]string{"runs", "enqueue", "wf", "--input", `{"n": 1}`}, flags...)...)
		var id int64
		_, err := fmt.Sscanf(out, "enqueued run %d of wf\n", &id)
		require.NoError(t, err, "output %q", out)
		out = s.ok(t, append([]string{"runs", "enqueue", "wf", "--input", `{"n": 2}`}, flags...)...)
		require.Equal(t, fmt.Sprintf("run %d of wf had not started: its input replaced (key %s)\n", id, flags[1]), out)
		run, err := s.st.RunGet(context.Background(), id)
		require.NoError(t, err)
		require.JSONEq(t, `{"n": 2}`, string(run.Input))
	}
}
