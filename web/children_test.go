package web_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

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
	_, err := e.db.SQL.ExecContext(context.Background(), `UPDATE cairn.runs SET parent_task_id = $1 WHERE id = $2`, spawner.ID, child)
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
