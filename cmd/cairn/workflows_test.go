package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// `workflows list` and `workflows show` print the workflows workers
// stored, with their versions: billing v1 (a, b) with a run in flight and
// v2 (a, b, c) current, though the server's process registers only wf.
func TestWorkflowsListShow(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	def := func(names ...string) []byte {
		d := engine.WorkflowDef{Name: "billing", Queue: "default"}
		for i, n := range names {
			td := engine.TaskDef{Name: n, Deps: []string{}, Queue: "default", MaxAttempts: 3, Timeout: time.Minute,
				Trigger: engine.AllSuccess, Handle: "billing." + n}
			if i > 0 {
				td.Deps = []string{names[i-1]}
			}
			d.Tasks = append(d.Tasks, td)
		}
		b, err := json.Marshal(d)
		require.NoError(t, err)
		return b
	}
	_, err := s.db.SQL.Exec(`INSERT INTO cairn.workflow_versions (workflow, version, definition, templates, registered_at)
		VALUES ('billing', 'v1', $1, '[]', now() - interval '1 hour'), ('billing', 'v2', $2, '[]', now())`, def("a", "b"), def("a", "b", "c"))
	require.NoError(t, err)
	w, err := s.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "old-box", Queues: map[string]int{"other": 1}, Handles: []string{"billing.a"}})
	require.NoError(t, err)
	_, err = s.db.SQL.Exec(`UPDATE cairn.workers SET versions = '{billing@v1}' WHERE id = $1`, w)
	require.NoError(t, err)
	require.NoError(t, s.st.QueueEnsure(ctx, []string{"other"}))
	runs, err := s.st.RunInsertMany(ctx, []store.RunInsertParams{{Workflow: "billing", Input: json.RawMessage(`{}`), Queue: "other",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}})
	require.NoError(t, err)
	_, err = s.db.SQL.Exec(`UPDATE cairn.run_rows SET version = 'v1' WHERE id = $1`, runs[0].ID)
	require.NoError(t, err)

	// The server's engine stored wf under its content hash.
	var wfVersion string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT version FROM cairn.workflow_versions WHERE workflow = 'wf'`).Scan(&wfVersion))

	out := s.ok(t, "workflows", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, []string{"WORKFLOW", "VERSION", "TASKS", "IN", "FLIGHT", "WORKERS", "STATE"}, strings.Fields(lines[0]))
	require.Equal(t, [][]string{
		{"billing", "v2", "3", "0", "0", "current"},
		{"billing", "v1", "2", "1", "1", "draining"},
		{"wf", wfVersion, "2", "0", "1", "current"},
	}, [][]string{strings.Fields(lines[1]), strings.Fields(lines[2]), strings.Fields(lines[3])})

	out = s.ok(t, "workflows", "show", "billing")
	require.Equal(t, []string{"Version", "v2"}, rowOf(t, out, "Version"))
	require.Equal(t, []string{"c", "b", "default", "3", "1m0s", "all_success", "-"}, rowOf(t, out, "c"))
	v1 := rowOf(t, out, "v1")
	require.Equal(t, []string{"v1", "a,b", "1", "0", "0", "0"}, v1[:6])
	require.Contains(t, strings.Join(v1[6:], " "), "old-box #")
	require.Equal(t, "draining", v1[len(v1)-1])

	r := s.cairn(t, "workflows", "show", "nope")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, `workflow "nope" not found`)
}
