package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Two keyed claims that start from the same turn at once take different
// keys: the second's walk passes over the key the first has taken,
// instead of stopping at it and finding its row locked.
func TestConcurrentKeyedClaimsTakeDifferentKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 100})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 100}
	var runs []store.RunInsertParams
	for k := range 4 {
		for range 20 {
			runs = append(runs, keyedTask("w", "default", fmt.Sprintf(`{"t": "k%d"}`, k), conc, nil))
		}
	}
	insertRuns(t, b, runs...)
	claim := func(st *store.Store) []store.Claimed {
		// 16 of a key's 20 tasks: each walk stops after the first key it
		// takes.
		c, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{16},
			Lease: time.Hour, Keyed: true})
		require.NoError(t, err)
		return c
	}
	keys := func(cs []store.Claimed) map[string]int {
		m := map[string]int{}
		for _, c := range cs {
			m[*c.ConcKey]++
		}
		return m
	}

	// The first claim's transaction stays open while the second runs.
	first := make(chan []store.Claimed)
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- b.st.InTx(ctx, func(tx *store.Store) error {
			first <- claim(tx)
			<-release
			return nil
		})
	}()
	a := <-first
	second := claim(b.st)
	close(release)
	require.NoError(t, <-done)

	ka, kb := keys(a), keys(second)
	require.Equal(t, map[string]int{store.FlowKey('c', "tenant", "k0"): 16}, ka, "the first claim: the first key's tasks")
	require.Equal(t, map[string]int{store.FlowKey('c', "tenant", "k1"): 16}, kb, "the second: the next key's, not none")
}

// The finish and keyed claim of one statement counts a key's room
// without the tasks it finishes, and with every other task of the key
// still running: finishing one of a key's two running tasks (its limit)
// frees one place, not two, and the claim's cursor comes back with it.
func TestFinishAndKeyedClaimFreesOnlyWhatItFinishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 100})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 2}
	var runs []store.RunInsertParams
	for range 6 {
		runs = append(runs, keyedTask("w", "default", `{"t": "k0"}`, conc, nil))
	}
	insertRuns(t, b, runs...)
	params := func(n int) store.ClaimParams {
		return store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Hour, Keyed: true}
	}
	running, err := b.st.TaskClaim(ctx, params(4))
	require.NoError(t, err)
	require.Len(t, running, 2, "the key's limit")
	finish := func(cs ...store.Claimed) store.TransitionParams {
		p := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w}
		for _, c := range cs {
			p.Items = append(p.Items, store.TransitionItem{TaskID: c.ID, From: store.StatusRunning, To: store.StatusCompleted, Attempt: c.Attempt})
		}
		return p
	}
	key := store.FlowKey('c', "tenant", "k0")

	moved, claimed, err := b.st.TaskFinishAndClaimOne(ctx, finish(running[0]), params(4))
	require.NoError(t, err)
	require.Len(t, moved, 1)
	require.Len(t, claimed, 1, "one place freed, one still held by the task left running")
	require.NotNil(t, claimed[0].AfterKey)
	require.Equal(t, key, *claimed[0].AfterKey, "the cursor: the key the turn visited")
	running = []store.Claimed{running[1], claimed[0]}

	moved, claimed, err = b.st.TaskFinishAndClaimOne(ctx, finish(running...), params(4))
	require.NoError(t, err)
	require.Len(t, moved, 2)
	require.Len(t, claimed, 2, "both places freed and taken again")
	require.Equal(t, 2, countRows(t, b, `SELECT count(*) FROM `+pgtest.Schema+`.tasks WHERE status = 'running'`))
	require.Equal(t, 3, countRows(t, b, `SELECT count(*) FROM `+pgtest.Schema+`.tasks WHERE status = 'completed'`))
}

// A keyed task finished by the one statement announces its queue, as a
// transition does: its key has room again, and another engine's claimer
// may have been waiting for it. Checked through order: the announcement
// comes before a marker sent after the statement.
func TestFinishAndKeyedClaimAnnouncesTheFreedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 100})
	require.NoError(t, err)
	insertRuns(t, b, keyedTask("w", "default", `{"t": "k0"}`, &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 1}, nil))
	running, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Hour, Keyed: true})
	require.NoError(t, err)
	require.Len(t, running, 1)
	ready := make(chan string, 100)
	ln, err := store.Listen(ctx, store.ListenParams{DSN: b.db.URL, Logger: slog.New(slog.DiscardHandler),
		Channels: []string{b.st.ReadyChannel()}, OnNotify: func(n store.Notification) { ready <- n.Payload }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })

	p := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: []store.TransitionItem{
		{TaskID: running[0].ID, From: store.StatusRunning, To: store.StatusCompleted, Attempt: running[0].Attempt}}}
	moved, claimed, err := b.st.TaskFinishAndClaimOne(ctx, p, store.ClaimParams{WorkerID: w, Lease: time.Hour, Keyed: true})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	require.Empty(t, claimed)
	require.NoError(t, b.st.ReadyNotify(ctx, []string{"marker"}))
	require.Equal(t, []string{"default", "marker"}, []string{receive(t, ready, "ready"), receive(t, ready, "ready")})
}

// A claim over many keys of few ready tasks each visits keys until it
// has what it asked for: the walk expects of each key no more than the
// ready tasks it counts there (up to flowProbe, 16), not its limit.
// Expecting flowQuantum (64) of each, a claim of 640 over keys of 5 tasks
// took 10 keys and 50 tasks.
func TestKeyedClaimOverManyKeysOfFewTasksTakesWhatItAsks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 1000})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 100}
	var runs []store.RunInsertParams
	for i := range 600 {
		runs = append(runs, keyedTask("w", "default", fmt.Sprintf(`{"t": "k%03d"}`, i%200), conc, nil))
	}
	insertRuns(t, b, runs...)
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{300}, Lease: time.Hour, Keyed: true})
	require.NoError(t, err)
	require.Len(t, got, 300, "200 keys of 3 tasks: a claim of 300 visits 100 of them")
	keys := map[string]int{}
	for _, c := range got {
		keys[*c.ConcKey]++
	}
	require.Len(t, keys, 100)
	for k, n := range keys {
		require.Equal(t, 3, n, "key %q: all its tasks", k)
	}
}

// A concurrency key's tasks may wait in several queues, and one claim may
// take from several queues at once: each queue's walk visits the key and
// finds the whole room, so the claim keeps the key's candidates within
// its room across queues. Before, a claim over two queues of a key of Max
// 2 started 4.
func TestKeyedClaimOverTwoQueuesKeepsTheKeysLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"qa", "qb"}))
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"qa": 100, "qb": 100})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 2}
	var runs []store.RunInsertParams
	for range 5 {
		runs = append(runs, keyedTask("w", "qa", `{"t": "k"}`, conc, nil), keyedTask("w", "qb", `{"t": "k"}`, conc, nil))
	}
	insertRuns(t, b, runs...)
	claim := func() []store.Claimed {
		t.Helper()
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"qa", "qb"}, Limits: []int{5, 5}, Lease: time.Hour, Keyed: true})
		require.NoError(t, err)
		return got
	}
	require.Len(t, claim(), 2, "the key's limit, over both queues")
	require.Empty(t, claim(), "the key is full")
	require.Equal(t, 2, countRows(t, b, `SELECT count(*) FROM `+pgtest.Schema+`.tasks WHERE status = 'running'`))
	var claims int
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT claims FROM `+pgtest.Schema+`.flow_keys WHERE key = $1`,
		store.FlowKey('c', "tenant", "k")).Scan(&claims))
	require.Equal(t, 2, claims, "the key's claims counter")
}

// A completion write whose attempts were all lost writes no item, but it
// still claims for the slots they held: before, its empty items went as
// JSON null, which the statement refused, and the claim failed with it.
func TestFinishAndClaimWithNoItemsClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	insertRuns(t, b, keyedTask("w", "default", `{}`, nil, nil), keyedTask("w", "default", `{}`, nil, nil))
	p := store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: w}
	moved, released, claimed, err := b.st.TaskFinishAndClaim(ctx, p,
		store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{5}, Lease: time.Hour})
	require.NoError(t, err)
	require.Empty(t, moved)
	require.Empty(t, released)
	require.Len(t, claimed, 2, "both ready tasks")
	moved, claimed, err = b.st.TaskFinishAndClaimOne(ctx, p,
		store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{5}, Lease: time.Hour})
	require.NoError(t, err)
	require.Empty(t, moved)
	require.Empty(t, claimed, "nothing left to claim")
}
