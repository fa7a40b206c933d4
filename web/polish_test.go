package web_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestPagesPolish: the small things a newcomer notices in the first hour.
func TestPagesPolish(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunCompleted)
	c := e.loggedIn(t, readonlyPW)

	// A task that never used steps has no Steps section; the attempt's
	// start time is a word apart from "started".
	a := e.task(t, runID, "a")
	doc := c.doc("/tasks/"+strconv.FormatInt(a.ID, 10), http.StatusOK)
	require.Zero(t, doc.Find(testid("task-steps")).Length())
	require.NotContains(t, doc.Text(), "No step journaled")
	require.NotContains(t, doc.Find("h2").Text(), "Steps")
	header := strings.Join(strings.Fields(doc.Find(testid("attempt")+" header").Text()), " ")
	require.Regexp(t, `started \d{4}-\d\d-\d\d`, header)

	// The overview: heartbeats in the site's one relative format ("2 s
	// ago", as the browser writes <time data-rel>), and a throughput
	// chart as wide as its box.
	doc = c.doc("/", http.StatusOK)
	hb := strings.TrimSpace(doc.Find(testid("worker-heartbeat")).First().Text())
	require.Regexp(t, regexp.MustCompile(`^\d+ (s|min) ago$`), hb)
	chart := doc.Find(testid("throughput-chart"))
	require.Equal(t, "100%", chart.AttrOr("width", ""))
	require.Equal(t, "none", chart.AttrOr("preserveAspectRatio", chart.AttrOr("preserveaspectratio", "")))
}
