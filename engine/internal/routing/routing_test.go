package routing_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/routing"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// handles is the registry side of a test: the names a router writes.
type handles struct {
	mu    sync.Mutex
	names []string
}

func (h *handles) set(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = names
}

func (h *handles) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.names)
}

func setup(t *testing.T) (*store.Store, *handles, *atomic.Int64, *routing.Router) {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	h := &handles{}
	var changed atomic.Int64
	r := routing.New(routing.Config{Store: st, Name: "w", Queues: map[string]int{"default": 2}, Registered: func() routing.Registered { return routing.Registered{Handles: h.get()} },
		Changed: func() { changed.Add(1) }, Lease: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	return st, h, &changed, r
}

func workerHandles(t *testing.T, st *store.Store, id int64) []string {
	t.Helper()
	ws, err := st.WorkerList(context.Background(), 10)
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == id {
			return w.Handles
		}
	}
	t.Fatalf("worker %d not listed", id)
	return nil
}

func TestRouterWritesTheHandlesItIsGiven(t *testing.T) {
	t.Parallel()
	st, h, changed, r := setup(t)
	ctx := context.Background()

	h.set("a.one")
	r.Sync() // before Register: nothing to write to
	require.Zero(t, changed.Load())

	id, err := r.Register(ctx, ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a.one"}, workerHandles(t, st, id))

	h.set("a.one", "b.two")
	r.Sync()
	require.Equal(t, []string{"a.one", "b.two"}, workerHandles(t, st, id))
	require.Equal(t, int64(1), changed.Load(), "a written change wakes the claims")

	r.Stop()
	h.set("c.three")
	r.Sync()
	require.Equal(t, []string{"a.one", "b.two"}, workerHandles(t, st, id), "a stopped router writes nothing")
}

func TestRouterRetriesAFailedWrite(t *testing.T) {
	t.Parallel()
	st, h, changed, r := setup(t)
	h.set("a.one")
	writes, cancel := context.WithCancel(context.Background())
	id, err := r.Register(context.Background(), writes)
	require.NoError(t, err)

	cancel() // every write under the loops' context now fails
	h.set("a.one", "b.two")
	r.Sync()
	require.Equal(t, []string{"a.one"}, workerHandles(t, st, id))
	require.Zero(t, changed.Load())

	// The next registration's context works again: RetryFailed writes.
	_, err = r.Register(context.Background(), context.Background())
	require.NoError(t, err)
	r.RetryFailed()
	require.Equal(t, int64(1), changed.Load())
	r.RetryFailed() // nothing failed since: no write
	require.Equal(t, int64(1), changed.Load())
}

func TestRouterStoresDefinitionsAndTheVersionsServed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	ctx := context.Background()
	var mu sync.Mutex
	reg := routing.Registered{Handles: []string{"wf.b", "wf.a"}, Versions: []store.WorkflowVersion{{Workflow: "wf", Version: "v2",
		Definition: []byte(`{}`), Templates: []byte(`[]`), Compatible: []string{"v1"}}}}
	cfg := routing.Config{Store: st, Name: "w", Queues: map[string]int{"default": 2}, Lease: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Registered: func() routing.Registered {
			mu.Lock()
			defer mu.Unlock()
			return reg
		}}
	stored := func() []string {
		t.Helper()
		rows, err := db.SQL.Query(`SELECT workflow || '@' || version FROM cairn.workflow_versions ORDER BY 1`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		return out
	}

	// An engine without a worker stores the definitions, and later ones.
	nw := routing.New(cfg)
	require.NoError(t, nw.Open(ctx, ctx))
	require.Equal(t, []string{"wf@v2"}, stored())

	w := routing.New(cfg)
	id, err := w.Register(ctx, ctx)
	require.NoError(t, err)
	ws, err := st.WorkerList(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, id, ws[0].ID)
	require.Equal(t, []string{"wf.a", "wf.b"}, ws[0].Handles)
	require.Equal(t, []string{"wf@v1", "wf@v2"}, ws[0].Versions, "its version and the compatible one")

	mu.Lock()
	reg.Versions = append(reg.Versions, store.WorkflowVersion{Workflow: "other", Version: "h1", Definition: []byte(`{}`), Templates: []byte(`[]`)})
	mu.Unlock()
	nw.Sync()
	require.Equal(t, []string{"other@h1", "wf@v2"}, stored())
	w.Sync()
	ws, err = st.WorkerList(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"other@h1", "wf@v1", "wf@v2"}, ws[0].Versions)
}
