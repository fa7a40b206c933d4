package web_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// durationRe matches what the site's duration formatter writes.
var durationRe = regexp.MustCompile(`^\d+(\.\d)? (ms|s|min|h|d)( \d+ (s|min|h))?$`)

func requireDuration(t *testing.T, s *goquery.Selection, what string) {
	t.Helper()
	require.Equal(t, 1, s.Length(), "%s: one element", what)
	require.Regexp(t, durationRe, strings.TrimSpace(s.Text()), what)
}

// requireStamp checks that sel holds a <time> of at, to the millisecond,
// with the UTC text the script rewrites.
func requireStamp(t *testing.T, sel *goquery.Selection, attr string, at time.Time, what string) {
	t.Helper()
	tm := sel.Find("time[datetime][" + attr + "]")
	require.Equal(t, 1, tm.Length(), "%s: a <time %s>", what, attr)
	got, err := time.Parse(time.RFC3339Nano, tm.AttrOr("datetime", ""))
	require.NoError(t, err, what)
	require.WithinDuration(t, at, got, time.Millisecond, what)
	require.Equal(t, at.UTC().Format("2006-01-02 15:04:05")+" UTC", strings.TrimSpace(tm.Text()), what)
}

// retriedRun runs wf with a failing permanently, then retries a (which
// completes) and waits for the run to complete: a has two attempts, b one.
func retriedRun(t *testing.T, e *env) int64 {
	t.Helper()
	e.failA.Store(true)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunFailed)
	e.failA.Store(false)
	require.NoError(t, e.eng.RetryTask(context.Background(), e.task(t, runID, "a").ID))
	e.waitRun(t, runID, store.RunCompleted)
	return runID
}

func TestRunPageWaterfallAndDurations(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := retriedRun(t, e)
	a, b := e.task(t, runID, "a"), e.task(t, runID, "b")
	require.Equal(t, 2, a.Attempt)
	require.Equal(t, 1, b.Attempt)
	run, err := e.st.RunGet(context.Background(), runID)
	require.NoError(t, err)
	c := e.loggedIn(t, readonlyPW)

	for _, path := range []string{fmt.Sprintf("/runs/%d", runID), fmt.Sprintf("/fragments/runs/%d", runID)} {
		doc := c.doc(path, http.StatusOK)
		wf := doc.Find(testid("waterfall"))
		require.Equal(t, 1, wf.Length(), path)
		require.Equal(t, 2, wf.Find(testid("wf-row")).Length(), path)
		// One bar per attempt, coloured by its outcome; the retried task
		// has its two bars on one row.
		require.Equal(t, a.Attempt+b.Attempt, wf.Find(testid("wf-bar")).Length(), path)
		statuses := func(id int64) []string {
			var out []string
			wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] [data-testid=wf-bar]`, id)).Each(func(_ int, s *goquery.Selection) {
				out = append(out, s.AttrOr("data-status", ""))
				require.True(t, s.HasClass("st-"+s.AttrOr("data-status", "")), "bar classed by its outcome")
				require.NotEmpty(t, s.Find("title").Text())
			})
			return out
		}
		require.Equal(t, []string{"failed", "completed"}, statuses(a.ID), path)
		require.Equal(t, []string{"completed"}, statuses(b.ID), path)
		attempts := wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] [data-testid=wf-bar]`, a.ID))
		require.Equal(t, "1", attempts.First().AttrOr("data-attempt", ""))
		require.Equal(t, "2", attempts.Last().AttrOr("data-attempt", ""))
		// A wait before each attempt.
		require.Equal(t, 2, wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] [data-testid=wf-wait]`, a.ID)).Length(), path)
		require.Equal(t, 1, wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] [data-testid=wf-wait]`, b.ID)).Length(), path)
		require.Contains(t, wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] text.label`, a.ID)).Text(), "a")
		require.GreaterOrEqual(t, wf.Find(testid("wf-tick")).Length(), 2, path)
		require.Equal(t, "0", strings.TrimSpace(wf.Find(testid("wf-tick")).First().Text()))
		require.NotContains(t, doc.Find(testid("waterfall-span")).Text(), "so far", "a finished run's chart is not live")

		// Durations: in the DAG boxes, the tasks table and the header.
		doc.Find(testid("dag-node")).Each(func(_ int, n *goquery.Selection) {
			d := n.Find(testid("dag-duration"))
			require.Equal(t, 1, d.Length(), "DAG box %s", n.Find("text.name").Text())
			require.Regexp(t, durationRe, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(d.Text()), "·")))
			require.Equal(t, "completed", strings.TrimSpace(n.Find("[data-status-text]").Text()), "the state stays apart, for the live script")
		})
		doc.Find(testid("task-row")).Each(func(_ int, r *goquery.Selection) {
			requireDuration(t, r.Find(testid("task-wait")), "queue wait of a task row")
			requireDuration(t, r.Find(testid("task-run-time")), "run time of a task row")
			require.Equal(t, 1, r.Find("time[datetime][data-rel]").Length(), "updated")
		})
		requireDuration(t, doc.Find(testid("run-duration")), "run duration")
		// Times: relative in the browser, UTC until then.
		header := doc.Find(testid("run-header"))
		require.Equal(t, 3, header.Find("time[datetime][data-rel]").Length(), "created, started, finished")
		requireStamp(t, header.Find("dd").FilterFunction(func(_ int, s *goquery.Selection) bool {
			return strings.TrimSpace(s.Prev().Text()) == "Created"
		}), "data-rel", run.CreatedAt, "created")
		events := doc.Find(testid("timeline")).Find(testid("event"))
		require.Positive(t, events.Length())
		events.Each(func(_ int, ev *goquery.Selection) {
			require.Equal(t, 1, ev.Find(`time[datetime][data-abs="ms"]`).Length(), "event time")
		})
	}
}

func TestRunPageWaitingTask(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	runID := e.enqueue(t, nil)
	a := e.task(t, runID, "a")
	require.Equal(t, store.StatusReady, a.Status)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc(fmt.Sprintf("/runs/%d", runID), http.StatusOK)
	node := doc.Find(fmt.Sprintf(`[data-testid=dag-node][data-task-id="%d"]`, a.ID))
	require.Regexp(t, `^· waiting \d`, strings.TrimSpace(node.Find(testid("dag-duration")).Text()))
	require.Zero(t, doc.Find(fmt.Sprintf(`[data-testid=dag-node][data-task-id="%d"] [data-testid=dag-duration]`, e.task(t, runID, "b").ID)).Length(),
		"a task waiting on its dependencies has no time yet")
	wf := doc.Find(testid("waterfall"))
	require.Zero(t, wf.Find(testid("wf-bar")).Length(), "no attempt yet")
	wait := wf.Find(fmt.Sprintf(`[data-testid=wf-row][data-task="%d"] [data-testid=wf-wait]`, a.ID))
	require.Equal(t, 1, wait.Length())
	require.True(t, wait.HasClass("open"), "the wait lasts")
	require.Contains(t, doc.Find(testid("waterfall-span")).Text(), "so far")
	require.Empty(t, strings.TrimSpace(doc.Find(testid("run-duration")).Text()), "a run not started has no duration")

	// The runs list: no duration before the run starts.
	doc = c.doc("/runs", http.StatusOK)
	row := doc.Find(fmt.Sprintf(`[data-testid=run-row][data-run-id="%d"]`, runID))
	require.Equal(t, 1, row.Length())
	require.Empty(t, strings.TrimSpace(row.Find(testid("run-duration")).Text()))
}

func TestRunsListDurations(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := retriedRun(t, e)
	run, err := e.st.RunGet(context.Background(), runID)
	require.NoError(t, err)
	c := e.loggedIn(t, readonlyPW)
	for _, path := range []string{"/runs", "/fragments/runs"} {
		doc := c.doc(path, http.StatusOK)
		row := doc.Find(fmt.Sprintf(`[data-testid=run-row][data-run-id="%d"]`, runID))
		require.Equal(t, 1, row.Length(), path)
		requireDuration(t, row.Find(testid("run-duration")), "run duration")
		requireStamp(t, row, "data-rel", run.CreatedAt, "created")
	}
	// The JSON list carries it too, in seconds.
	res, body := c.get("/api/runs")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"duration_seconds":`)
}

func TestTaskPageAttemptDurations(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := retriedRun(t, e)
	a := e.task(t, runID, "a")
	c := e.loggedIn(t, readonlyPW)
	for _, path := range []string{fmt.Sprintf("/tasks/%d", a.ID), fmt.Sprintf("/fragments/tasks/%d", a.ID)} {
		doc := c.doc(path, http.StatusOK)
		atts := doc.Find(testid("attempt"))
		require.Equal(t, 2, atts.Length(), path)
		atts.Each(func(i int, at *goquery.Selection) {
			requireDuration(t, at.Find(testid("attempt-wait")), fmt.Sprintf("queue wait before attempt %d", i+1))
			requireDuration(t, at.Find(testid("attempt-duration")), fmt.Sprintf("run time of attempt %d", i+1))
			require.Equal(t, 1, at.Find("header time[datetime][data-rel]").Length(), "attempt %d start", i+1)
		})
		requireDuration(t, doc.Find(testid("task-queue-wait")), "task queue wait")
		requireDuration(t, doc.Find(testid("task-run-time")), "task run time")
		head := doc.Find(testid("task-header"))
		require.Equal(t, 3, head.Find("time[datetime][data-rel]").Length(), "created, started, finished")
		requireStamp(t, head.Find("dd").FilterFunction(func(_ int, s *goquery.Selection) bool {
			return strings.TrimSpace(s.Prev().Text()) == "Created"
		}), "data-rel", a.CreatedAt, "created")
	}
}
