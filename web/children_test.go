package web_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestRunPageLinksParentAndChildren: a child run's page names its parent
// run and task; the parent's page lists its children with their status.
func TestRunPageLinksParentAndChildren(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	parent := e.enqueue(t, nil)
	child := e.enqueue(t, nil)
	e.waitRun(t, parent, store.RunCompleted)
	e.waitRun(t, child, store.RunCompleted)
	spawner := e.task(t, parent, "a")
	// As TaskHandle.SpawnRun records it (the engine tests cover the spawn).
	_, err := e.db.SQL.ExecContext(context.Background(), `UPDATE cairn.run_rows SET parent_task_id = $1 WHERE id = $2`, spawner.ID, child)
	require.NoError(t, err)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc("/runs/"+strconv.FormatInt(parent, 10), http.StatusOK)
	rows := doc.Find(testid("child-run"))
	require.Equal(t, 1, rows.Length())
	href, _ := rows.Find("a").Attr("href")
	require.Equal(t, "/runs/"+strconv.FormatInt(child, 10), href)
	require.Contains(t, rows.Text(), "completed")
	require.Contains(t, rows.Text(), "a")
	require.Zero(t, doc.Find(testid("run-parent")).Length(), "a run nobody spawned has no parent")

	doc = c.doc("/runs/"+strconv.FormatInt(child, 10), http.StatusOK)
	p := doc.Find(testid("run-parent"))
	require.Equal(t, 1, p.Length())
	require.Contains(t, p.Text(), "run #"+strconv.FormatInt(parent, 10))
	links := p.Find("a")
	require.Equal(t, 2, links.Length())
	href, _ = links.Eq(0).Attr("href")
	require.Equal(t, "/runs/"+strconv.FormatInt(parent, 10), href)
	href, _ = links.Eq(1).Attr("href")
	require.Equal(t, "/tasks/"+strconv.FormatInt(spawner.ID, 10), href)
	require.Zero(t, doc.Find(testid("child-runs")).Length())
}

// TestRunPageDAGCountsChildren: on the run page's DAG, a task that
// spawned child runs carries one badge counting the finished ones, which
// the live fragment updates; tasks without children carry none.
func TestRunPageDAGCountsChildren(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "hold", Tasks: []engine.Task{{
		Name: "h",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			_, err := h.AwaitSignal(ctx, "go", 0)
			return err
		},
	}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "fan", Tasks: []engine.Task{
		{Name: "p", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			a, err := h.SpawnRun(ctx, "one", "hold", nil)
			if err != nil {
				return err
			}
			b, err := h.SpawnRun(ctx, "two", "hold", nil)
			if err != nil {
				return err
			}
			_, err = h.AwaitRuns(ctx, a.ID, b.ID)
			return err
		}},
		{Name: "q", Deps: []string{"p"}, Run: func(ctx context.Context, h *engine.TaskHandle) error { return nil }},
	}}))
	run, err := e.eng.Enqueue(ctx, "fan", nil)
	require.NoError(t, err)
	parent := e.task(t, run.ID, "p")
	e.parkedTask(t, parent.ID, store.WaitKindRuns)
	page := "/runs/" + strconv.FormatInt(run.ID, 10)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc(page, http.StatusOK)
	badges := doc.Find(testid("dag") + " " + testid("dag-children"))
	require.Equal(t, 1, badges.Length(), "only the spawning task has children")
	require.Equal(t, strconv.FormatInt(parent.ID, 10), badges.AttrOr("data-task-id", ""))
	require.Contains(t, badges.Text(), "children 0/2 done")
	require.Equal(t, "#child-runs", badges.AttrOr("href", ""))
	require.Equal(t, 1, doc.Find("#child-runs").Length(), "the badge's anchor exists")
	require.Equal(t, 2, doc.Find("[data-child-run]").Length(), "the live refresh follows the listed children")

	// One child finishes: the live fragment's count moves.
	children, err := e.st.RunChildList(ctx, run.ID, 10)
	require.NoError(t, err)
	require.Len(t, children, 2)
	require.NoError(t, e.eng.SendSignal(ctx, e.task(t, children[0].ID, "h").ID, "go", nil))
	e.waitRun(t, children[0].ID, store.RunCompleted)
	frag := c.doc("/fragments"+page, http.StatusOK)
	badges = frag.Find(testid("dag-children"))
	require.Equal(t, 1, badges.Length())
	require.Contains(t, badges.Text(), "children 1/2 done")
}
