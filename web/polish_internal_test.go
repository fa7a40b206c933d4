package web

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestFmtRelative: the site's one relative time format, the same as the
// browser's for <time data-rel> (app.js): a space before the unit.
func TestFmtRelative(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-36 * time.Second:         "36 s ago",
		-3 * time.Minute:          "3 min ago",
		-5 * time.Hour:            "5 h ago",
		-72 * time.Hour:           "3 d ago",
		2 * time.Second:           "0 s ago", // clocks a little apart
		90 * time.Second:          "in 1 min",
		3*time.Hour + time.Minute: "in 3 h",
	} {
		require.Equal(t, want, fmtRelative(d), d)
	}
	require.Equal(t, "2 s ago", fmtAge(2))
	require.Equal(t, "4 min ago", fmtAge(240))
}

// TestAttentionUnroutableGrammar: one ready task is "1 ready task".
func TestAttentionUnroutableGrammar(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 10, 7, 0, 0, time.UTC)
	set := buildBreakdowns(nil, breakdownData{window: breakdownWindow(now)}, nil, nil, []store.Unroutable{
		{Queue: "one", Workflow: "w", Task: "t", Ready: 1},
		{Queue: "two", Workflow: "w", Task: "u", Ready: 2},
	})
	var texts []string
	for _, a := range set.Attention {
		texts = append(texts, a.Subject+a.Text)
	}
	require.ElementsMatch(t, []string{
		"queue one: 1 ready task no live worker can run (w.t)",
		"queue two: 2 ready tasks no live worker can run (w.u)",
	}, texts)
}
