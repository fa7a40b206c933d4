package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

// Two deployments in two schemas of one database: claims, notifications
// and the site each see their own schema only.
func TestSchemasKeepDeploymentsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	for _, schema := range []string{"alpha", "beta"} {
		r, err := migrations.NewRunner(db.SQL, schema)
		require.NoError(t, err)
		_, err = r.Up(ctx, 0)
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var ran []string // "engine schema/run input schema" of each attempt
	newEngine := func(schema string, noWorker bool) *engine.Engine {
		eng, err := engine.New(db.SQL, engine.Config{
			Schema: schema, NoWorker: noWorker, DatabaseURL: db.URL, Logger: testLogger(t),
			PollInterval: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
			LeaseDuration: 2 * time.Second, RescueInterval: 200 * time.Millisecond, ShutdownGrace: 2 * time.Second,
		})
		require.NoError(t, err)
		// The same workflow in both: only the schema keeps them apart.
		require.NoError(t, eng.Register(engine.Workflow{Name: "wf", Tasks: []engine.Task{{Name: "a",
			Run: func(ctx context.Context, h *engine.TaskHandle) error {
				var in struct{ Schema string }
				if err := h.RunInput(&in); err != nil {
					return err
				}
				mu.Lock()
				ran = append(ran, schema+"/"+in.Schema)
				mu.Unlock()
				return nil
			}}}}))
		return eng
	}
	alpha, beta := newEngine("alpha", false), newEngine("beta", true)
	betaEvents, stop := beta.Subscribe(1024)
	defer stop()
	for _, eng := range []*engine.Engine{alpha, beta} {
		require.NoError(t, eng.Start(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = eng.Shutdown(ctx)
		})
	}
	var betaRuns []int64
	for range 2 {
		r, err := beta.Enqueue(ctx, "wf", map[string]string{"schema": "beta"})
		require.NoError(t, err)
		betaRuns = append(betaRuns, r.ID)
	}
	alphaRun, err := alpha.Enqueue(ctx, "wf", map[string]string{"schema": "alpha"})
	require.NoError(t, err)
	eventually(t, 20*time.Second, "alpha's run to complete", func() bool {
		r, err := newStore(t, db.SQL, "alpha").RunGet(ctx, alphaRun.ID)
		require.NoError(t, err)
		return r.Status == store.RunCompleted
	})

	// Claims: alpha's worker never ran beta's tasks, though they are ready.
	mu.Lock()
	require.Equal(t, []string{"alpha/alpha"}, ran)
	mu.Unlock()
	for _, id := range betaRuns {
		r, err := newStore(t, db.SQL, "beta").RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.RunPending, r.Status)
	}

	// Notifications: beta's subscriber sees beta's cancel, and nothing of
	// alpha's run (which ran and completed before it).
	require.NoError(t, beta.CancelRun(ctx, betaRuns[0]))
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-betaEvents:
			require.NotContains(t, []string{store.StatusRunning, store.StatusCompleted}, ev.To, "event %+v reached beta", ev)
			done = ev.To == store.StatusCancelled
		case <-timeout:
			t.Fatal("beta's subscriber never saw beta's cancel")
		}
	}

	// The site over each schema lists that schema's runs only.
	for _, c := range []struct {
		eng    *engine.Engine
		schema string
		runs   int
	}{{alpha, "alpha", 1}, {beta, "beta", 2}} {
		srv, err := web.New(web.Config{Engine: c.eng, Reads: newStore(t, db.SQL, c.schema), ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
		require.NoError(t, err)
		ts := httptest.NewServer(checkContract(t, srv.Handler()))
		res, err := http.Get(ts.URL + "/api/runs")
		require.NoError(t, err)
		var body struct {
			Runs []json.RawMessage `json:"runs"`
		}
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		res.Body.Close()
		ts.Close()
		require.Len(t, body.Runs, c.runs, "runs listed over schema %s", c.schema)
	}
}
