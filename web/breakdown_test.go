package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// seedBreakdown inserts five one-task runs of workflow "seeded" on queue
// "sq", which no worker registers: four finished with known timings
// (queue waits 1..4 s, run times 10..40 s; three completed, one failed),
// one left ready (no live worker can run it).
func seedBreakdown(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.st.QueueEnsure(ctx, []string{"sq"}))
	ps := make([]store.RunInsertParams, 5)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "seeded", Input: json.RawMessage(`{}`), Queue: "sq",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	res, err := e.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	// All of it within one 5-minute bucket of the chart (buckets are
	// aligned on the clock), and in the past: the current bucket's start
	// when it began a minute ago or more, else the one before.
	base := time.Now().UTC().Truncate(5 * time.Minute)
	if time.Since(base) < time.Minute {
		base = base.Add(-5 * time.Minute)
	}
	base = base.Add(time.Second)
	for i := range 4 {
		task := e.task(t, res[i].ID, "only")
		wait, run := time.Duration(i+1)*time.Second, time.Duration(10*(i+1))*time.Second
		to := "completed"
		if i == 3 {
			to = "failed"
		}
		_, err := e.db.SQL.ExecContext(ctx, `UPDATE cairn.tasks SET status = $2, attempt = 1, available_at = $3, started_at = $4, finished_at = $5 WHERE id = $1`,
			task.ID, to, base, base.Add(wait), base.Add(wait+run))
		require.NoError(t, err)
		_, err = e.db.SQL.ExecContext(ctx, `INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, attempt, at) VALUES
			($1, $2, 'ready', 'running', 1, $3), ($1, $2, 'running', $4, 1, $5)`, res[i].ID, task.ID, base.Add(wait), to, base.Add(wait+run))
		require.NoError(t, err)
	}
}

// TestOverviewBreakdown: the overview breaks the last hour down per
// workflow and per queue (SVG spark chart per row, counts by state,
// failure rate, p50/p95 queue wait and run time), lists what needs
// attention first, and /api/overview returns the same figures next to
// its existing fields.
func TestOverviewBreakdown(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	seedBreakdown(t, e)

	var row *goquery.Selection
	var doc *goquery.Document
	eventually(t, 15*time.Second, "the seeded workflow's breakdown", func() bool {
		doc = c.doc("/", http.StatusOK)
		row = doc.Find(testid("workflow-breakdown") + ` [data-testid="breakdown-row"][data-name="seeded"]`)
		// Each aggregate is cached for up to two seconds on its own.
		return row.Length() == 1 && row.Find(testid("breakdown-completed")).Text() == "3" &&
			doc.Find(testid("attention-item")).Length() > 0
	})
	require.Equal(t, "1", row.Find(testid("breakdown-failed")).Text())
	require.Equal(t, "25.0%", row.Find(testid("breakdown-failrate")).Text())
	require.Equal(t, "0.1", row.Find(testid("breakdown-throughput")).Text())
	require.Equal(t, "2.5 s / 3.8 s", strings.Join(strings.Fields(row.Find(testid("breakdown-wait")).Text()), " "))
	require.Equal(t, "25 s / 38 s", strings.Join(strings.Fields(row.Find(testid("breakdown-run")).Text()), " "))
	states := map[string]string{}
	row.Find(testid("breakdown-state")).Each(func(_ int, s *goquery.Selection) { states[s.AttrOr("data-state", "")] = s.Text() })
	require.Equal(t, map[string]string{"completed": "completed 3", "failed": "failed 1", "ready": "ready 1"}, states)

	svg := row.Find("svg" + testid("spark-chart"))
	require.Equal(t, 1, svg.Length(), "an inline SVG chart")
	require.Equal(t, 12, svg.Find(testid("spark-bar")).Length(), "one bar per 5 minutes")
	filled := svg.Find(testid("spark-bar")).FilterFunction(func(_ int, s *goquery.Selection) bool { return s.Find("rect.done").Length() > 0 })
	require.Equal(t, 1, filled.Length(), "one bucket had finished tasks")
	require.Contains(t, filled.Find("title").Text(), "3 completed, 1 failed, p95 run 38 s")
	require.Equal(t, 1, filled.Find("rect.fail").Length())

	// The queue no worker serves is the first thing to see, and its row
	// comes first, with a badge; the seeded workflow too.
	first := doc.Find(testid("attention-item")).First()
	require.Equal(t, "unroutable", first.AttrOr("data-kind", ""))
	require.Contains(t, first.Text(), "queue sq")
	require.Contains(t, first.Text(), "1 ready task no live worker can run (seeded.only)")
	qrow := doc.Find(testid("queue-breakdown") + ` [data-testid="breakdown-row"]`).First()
	require.Equal(t, "sq", qrow.AttrOr("data-name", ""))
	require.Equal(t, "no worker", qrow.Find(testid("breakdown-attention")).Text())
	require.Equal(t, "seeded", doc.Find(testid("workflow-breakdown")+` [data-testid="breakdown-row"]`).First().AttrOr("data-name", ""))

	// The queues page shows the same.
	qdoc := c.doc("/queues", http.StatusOK)
	require.Equal(t, "unroutable", qdoc.Find(testid("attention-item")).First().AttrOr("data-kind", ""))
	require.Equal(t, "3", qdoc.Find(testid("queue-breakdown")+` [data-name="sq"] `+testid("breakdown-completed")).Text())

	res, body := c.get("/api/overview")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var api struct {
		TasksTotal *int64 `json:"tasks_total"`
		Throughput []any  `json:"throughput_per_minute"`
		Workflows  []struct {
			Name      string           `json:"name"`
			States    map[string]int64 `json:"tasks_by_state"`
			Completed int64            `json:"completed"`
			Failed    int64            `json:"failed"`
			FailRate  float64          `json:"failure_rate"`
			WaitP50   float64          `json:"wait_p50_seconds"`
			WaitP95   float64          `json:"wait_p95_seconds"`
			RunP50    float64          `json:"run_p50_seconds"`
			RunP95    float64          `json:"run_p95_seconds"`
			Buckets   []struct {
				Completed int64 `json:"completed"`
			} `json:"buckets"`
			Attention string `json:"attention"`
		} `json:"workflows"`
		Queues    []struct{ Name string } `json:"queues"`
		Attention []struct{ Kind, Subject string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &api))
	require.NotNil(t, api.TasksTotal, "existing fields stay")
	require.NotEmpty(t, api.Throughput)
	require.Equal(t, "seeded", api.Workflows[0].Name)
	w := api.Workflows[0]
	require.Equal(t, map[string]int64{"completed": 3, "failed": 1, "ready": 1}, w.States)
	require.Equal(t, int64(3), w.Completed)
	require.InDelta(t, 0.25, w.FailRate, 1e-9)
	require.InDelta(t, 2.5, w.WaitP50, 1e-6)
	require.InDelta(t, 3.85, w.WaitP95, 1e-6)
	require.InDelta(t, 25, w.RunP50, 1e-6)
	require.InDelta(t, 38.5, w.RunP95, 1e-6)
	require.Len(t, w.Buckets, 12)
	require.Equal(t, "no worker", w.Attention)
	require.Equal(t, "sq", api.Queues[0].Name)
	require.Equal(t, "unroutable", api.Attention[0].Kind)
}

// horizonItems returns the horizon items of the attention list of doc
// that name the session with pid: the tests below look at their own
// transaction only, whatever else holds a snapshot meanwhile (the
// page's own reads, the engine's).
func horizonItems(doc *goquery.Document, pid int) *goquery.Selection {
	holder := fmt.Sprintf("session pid %d (", pid)
	return doc.Find(testid("attention-item") + `[data-kind="horizon"]`).FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.Contains(s.Text(), holder)
	})
}

// apiHorizon returns the horizon items of /api/overview.
func apiHorizon(t *testing.T, c *client) []attention {
	t.Helper()
	res, body := c.get("/api/overview")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var api struct {
		Attention []attention `json:"attention"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &api))
	var out []attention
	for _, a := range api.Attention {
		if a.Kind == "horizon" {
			out = append(out, a)
		}
	}
	return out
}

type attention struct{ Kind, Subject, Text string }

// heldForRe reads how long the item says its session has been in its
// transaction.
var heldForRe = regexp.MustCompile(`in a transaction for ([0-9hms.]+),`)

// TestOverviewShowsATransactionThatHoldsBackVacuum: a transaction open
// past the threshold is in the attention list of the overview and of
// /api/overview, naming its session (pid, application, state) and how
// long it has held the horizon; once it ends it is gone.
func TestOverviewShowsATransactionThatHoldsBackVacuum(t *testing.T) {
	t.Parallel()
	const threshold = time.Second
	e := setup(t, func(_ *engine.Config, w *web.Config) { w.HeldHorizon = threshold })
	c := e.loggedIn(t, adminPW)
	pid, release := e.db.HoldSnapshot(t)

	holder := fmt.Sprintf("session pid %d (", pid)
	var item *goquery.Selection
	eventually(t, 15*time.Second, "the held snapshot in the attention list", func() bool {
		item = horizonItems(c.doc("/", http.StatusOK), pid)
		return item.Length() == 1
	})
	require.Contains(t, item.Text(), "vacuum held back")
	require.Contains(t, item.Text(), holder)
	require.Contains(t, item.Text(), "idle in transaction")
	require.Contains(t, item.Text(), "holds back vacuum (xmin age ")
	m := heldForRe.FindStringSubmatch(item.Text())
	require.NotNil(t, m, "how long: %s", item.Text())
	held, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, held, threshold, "shown only past the threshold")

	eventually(t, 15*time.Second, "the held snapshot in /api/overview", func() bool {
		return slices.ContainsFunc(apiHorizon(t, c), func(a attention) bool { return strings.HasPrefix(a.Subject, holder) })
	})

	release()
	eventually(t, 15*time.Second, "the attention item gone with its transaction", func() bool {
		return horizonItems(c.doc("/", http.StatusOK), pid).Length() == 0
	})
}

// TestOverviewIgnoresAYoungTransaction: a transaction younger than the
// default threshold (a minute) is not in the attention list, though it is
// the oldest snapshot of the database when the site reads the horizon.
func TestOverviewIgnoresAYoungTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.Equal(t, web.DefaultHeldHorizon, web.HeldHorizon(e.srv))
	ctx := context.Background()
	pid, _ := e.db.HoldSnapshot(t)
	holder := fmt.Sprintf("pid %d (", pid)
	// The store names it as the horizon before the site first reads it
	// (logging in loads the overview): a younger snapshot never takes
	// its place while it is open, so every read of the site names it.
	eventually(t, 15*time.Second, "the held snapshot named as the horizon", func() bool {
		h, err := e.st.Horizon(ctx)
		require.NoError(t, err)
		return strings.HasPrefix(h.Holder, holder)
	})
	c := e.loggedIn(t, adminPW)
	for _, path := range []string{"/", "/queues"} {
		require.Zero(t, c.doc(path, http.StatusOK).Find(testid("attention-item")+`[data-kind="horizon"]`).Length(),
			"%s: a young transaction is no alarm", path)
	}
	require.Empty(t, apiHorizon(t, c))

	h, err := e.st.Horizon(ctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(h.Holder, holder), "still the horizon: %+v", h)
	require.Less(t, h.For, web.DefaultHeldHorizon, "still young")
}
