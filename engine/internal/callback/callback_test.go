package callback_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/callback"
	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The engine's error values, as the tests' own.
var (
	errInvalid  = errors.New("invalid input")
	errNotFound = errors.New("not found")
	errLost     = errors.New("task taken from this worker")
	errTooLarge = errors.New("too large")
	errState    = errors.New("invalid state")
	jerrs       = journal.Errors{InvalidInput: errInvalid, NotFound: errNotFound, TaskLost: errLost}
	errs        = callback.Errors{Errors: jerrs, TooLarge: errTooLarge, InvalidState: errState}
)

const base = "https://cairn.example.com/"

// task is one single-task run's task, claimed by a worker.
type task struct {
	db     *sql.DB
	st     *store.Store
	worker int64
	held   store.StepHolder // the current attempt
}

func setup(t *testing.T) *task {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	_, err = st.RunInsertMany(ctx, []store.RunInsertParams{{Workflow: "wf", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}})
	require.NoError(t, err)
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": 1})
	require.NoError(t, err)
	tk := &task{db: db.SQL, st: st, worker: w}
	tk.claim(t)
	return tk
}

func (tk *task) claim(t *testing.T) {
	t.Helper()
	c, err := tk.st.TaskClaim(context.Background(), store.ClaimParams{WorkerID: tk.worker, Queues: []string{"default"},
		Limits: []int{1}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c, 1)
	tk.held = store.StepHolder{TaskID: c[0].ID, WorkerID: tk.worker, Attempt: c[0].Attempt}
}

// end moves the current attempt's task to status: ready (then the next
// attempt claims it) or completed.
func (tk *task) end(t *testing.T, status string) {
	t.Helper()
	moved, err := tk.st.Transition(context.Background(), store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: tk.worker,
		Items: []store.TransitionItem{{TaskID: tk.held.TaskID, To: status, Attempt: tk.held.Attempt}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	if status == store.StatusReady {
		tk.claim(t)
	}
}

func (tk *task) mint(t *testing.T, name string, ttl time.Duration) string {
	t.Helper()
	u, err := callback.Mint(context.Background(), tk.st, tk.held, base, name, ttl, jerrs)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u, "https://cairn.example.com/callbacks/"), u)
	return strings.TrimPrefix(u, "https://cairn.example.com/callbacks/")
}

func (tk *task) use(token, payload string) (int64, error) {
	var signalled int64
	id, err := callback.Use(context.Background(), tk.st, token, json.RawMessage(payload), 1<<10, "192.0.2.7",
		func(id int64) { signalled = id }, errs)
	if err == nil && signalled != id {
		return id, errors.New("the task was not woken")
	}
	return id, err
}

func (tk *task) signals(t *testing.T) []store.Signal {
	t.Helper()
	sigs, err := tk.st.SignalListByTask(context.Background(), tk.held.TaskID)
	require.NoError(t, err)
	return sigs
}

func (tk *task) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, tk.db.QueryRow(`SELECT count(*) FROM `+pgtest.Schema+`.callbacks`).Scan(&n))
	return n
}

func TestMintIsRefusedToAStaleAttemptAndChecksItsInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	stale := tk.held
	tk.end(t, store.StatusReady)
	_, err := callback.Mint(ctx, tk.st, stale, base, "approve", time.Hour, jerrs)
	require.ErrorIs(t, err, errLost, "the attempt no longer holds the task")
	for _, tc := range []struct {
		base, name string
		ttl        time.Duration
		want       string
	}{
		{"", "approve", time.Hour, "CallbackBaseURL"},
		{base, "approve", 0, "ttl"},
		{base, "", time.Hour, "signal name"},
	} {
		_, err := callback.Mint(ctx, tk.st, tk.held, tc.base, tc.name, tc.ttl, jerrs)
		require.ErrorIs(t, err, errInvalid)
		require.ErrorContains(t, err, tc.want)
	}
	require.Zero(t, tk.count(t), "nothing minted")

	tok := tk.mint(t, "approve", time.Hour)
	require.Len(t, tok, 43, "32 bytes, base64url")
	require.NotEqual(t, tok, tk.mint(t, "approve", time.Hour), "each call mints a new one")
	var stored []byte
	require.NoError(t, tk.db.QueryRow(`SELECT token_hash FROM `+pgtest.Schema+`.callbacks WHERE attempt = $1 LIMIT 1`, tk.held.Attempt).Scan(&stored))
	require.Len(t, stored, 32)
	require.NotContains(t, string(stored), tok, "only the hash is stored")
}

func TestUseDeliversOnceAcrossAttempts(t *testing.T) {
	t.Parallel()
	tk := setup(t)
	tok := tk.mint(t, "approve", time.Hour)
	tk.end(t, store.StatusReady) // a restart: the next attempt waits for the same signal
	id, err := tk.use(tok, `{"ok": true}`)
	require.NoError(t, err)
	require.Equal(t, tk.held.TaskID, id)
	sigs := tk.signals(t)
	require.Len(t, sigs, 1)
	require.Equal(t, "approve", sigs[0].Name)
	require.JSONEq(t, `{"ok": true}`, string(sigs[0].Payload))
	var by string
	require.NoError(t, tk.db.QueryRow(`SELECT used_by FROM `+pgtest.Schema+`.callbacks WHERE used_at IS NOT NULL`).Scan(&by))
	require.Equal(t, "192.0.2.7", by)

	_, err = tk.use(tok, `{"ok": true}`)
	require.ErrorIs(t, err, errState, "used")
	require.ErrorContains(t, err, "already used")
	require.Len(t, tk.signals(t), 1)
}

func TestUseRefusals(t *testing.T) {
	t.Parallel()
	tk := setup(t)
	tok := tk.mint(t, "approve", time.Hour)

	for _, tc := range []struct {
		token, payload string
		want           error
	}{
		{"forged", `{}`, errNotFound},
		{strings.Repeat("A", 43), `{}`, errNotFound},
		{tok, `{"x": `, errInvalid},
		{tok, `"\u0000"`, errInvalid},
		{tok, `"` + strings.Repeat("x", 2000) + `"`, errTooLarge},
	} {
		_, err := tk.use(tc.token, tc.payload)
		require.ErrorIs(t, err, tc.want, "%s %s", tc.token, tc.payload)
	}
	require.Empty(t, tk.signals(t))

	// Expired: 403's error, nothing written.
	expired := tk.mint(t, "approve", time.Hour)
	_, err := tk.db.Exec(`UPDATE `+pgtest.Schema+`.callbacks SET expires_at = now() - interval '1 second' WHERE token_hash = $1`, callback.Hash(expired))
	require.NoError(t, err)
	_, err = tk.use(expired, `{}`)
	require.ErrorIs(t, err, errNotFound)
	require.ErrorContains(t, err, "expired")
	require.Empty(t, tk.signals(t))

	// Moved on: a signal of the name since the URL was minted answered
	// the wait.
	require.NoError(t, func() error {
		_, err := tk.st.SignalSend(context.Background(), tk.held.TaskID, "approve", json.RawMessage(`1`))
		return err
	}())
	_, err = tk.use(tok, `{}`)
	require.ErrorIs(t, err, errState)
	require.ErrorContains(t, err, "moved on")
	require.Len(t, tk.signals(t), 1)
	// A URL minted after it works.
	_, err = tk.use(tk.mint(t, "approve", time.Hour), `2`)
	require.NoError(t, err)

	// Moved on: the task finished.
	late := tk.mint(t, "other", time.Hour)
	tk.end(t, store.StatusCompleted)
	_, err = tk.use(late, `{}`)
	require.ErrorIs(t, err, errState)
	require.ErrorContains(t, err, "finished")
	require.Len(t, tk.signals(t), 2)
}
