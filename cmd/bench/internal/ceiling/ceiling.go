// Package ceiling renders the pgbench scripts of the benchmark's ceiling
// scenario (cmd/bench -scenario ceiling): the burn-down's database work
// with pgbench, no Go engine in the way. Each pgbench transaction
// completes the tasks its client claimed in the previous one and claims
// the next batch, as the engine's completer does with TaskFinishAndClaim.
// Cairn's script is rendered from the store's own statements
// (store.FinishAndClaimStatements), so the ceiling follows the schema and
// the SQL; the bare floor's SQL is the benchmark's own.
package ceiling

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/sqltext"
)

// ErrInvalidParams is returned for Params a script cannot be rendered for.
var ErrInvalidParams = errors.New("invalid pgbench params")

// Params shape the ceiling's pgbench scripts.
type Params struct {
	// Queue is the queue claimed from.
	Queue string
	// Batch is how many tasks a transaction claims (and the next one
	// completes).
	Batch int
	// Lease is the lease a claim gives its tasks.
	Lease time.Duration
}

// Script is a pgbench script, to run with -M prepared (its
// statements take pgbench :variables where the store passes parameters),
// and the variables it expects (pgbench -D name=value). Each client is
// worker :client_id + 1.
type Script struct {
	Text string
	Vars map[string]string
}

// Args returns the pgbench arguments that define s's variables, sorted
// by name.
func (s Script) Args() []string {
	names := make([]string, 0, len(s.Vars))
	for k := range s.Vars {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]string, 0, 2*len(names))
	for _, k := range names {
		out = append(out, "-D", k+"="+s.Vars[k])
	}
	return out
}

func (p Params) check() error {
	if p.Batch < 1 {
		return fmt.Errorf("%w: pgbench batch must be at least 1, got %d", ErrInvalidParams, p.Batch)
	}
	if p.Queue == "" {
		return fmt.Errorf("%w: pgbench queue is empty", ErrInvalidParams)
	}
	if p.Lease < time.Millisecond {
		return fmt.Errorf("%w: pgbench lease must be at least 1ms, got %s", ErrInvalidParams, p.Lease)
	}
	return nil
}

// Cairn renders st's own statements as one pgbench transaction:
// the transition statement (TaskFinishAndClaim's first half, as the
// engine's completer sends it: running or deferred tasks of this worker to
// completed, with their events, run counters and statuses, and NOTIFY),
// then the claim statement (ready to running, events, run status, NOTIFY),
// both exactly as the store prepares them. A last statement, which the
// engine does not need as it keeps the ids it claimed, reads back this
// transaction's claims into the item list (:items) of the next one.
func Cairn(st *store.Store, p Params) (Script, error) {
	return cairn(st, p, false)
}

// CairnKeyed is Cairn with the keyed claim (flow control: the tasks
// seeded have concurrency keys), as the engine sends it for a worker
// that may claim keyed tasks: each claim starts its turn across keys
// after the last key the previous one visited (read back with \aset).
func CairnKeyed(st *store.Store, p Params) (Script, error) {
	return cairn(st, p, true)
}

func cairn(st *store.Store, p Params, keyed bool) (Script, error) {
	if err := p.check(); err != nil {
		return Script{}, err
	}
	finish, claimQuery := st.FinishAndClaimStatements(p.Batch)
	transition, err := pgbenchVars(finish,
		"items", "worker", "worker", "events", "ready", "control", "taken")
	if err != nil {
		return Script{}, fmt.Errorf("render the transition statement: %w", err)
	}
	args := []string{"queues", "limits", "floor_p", "floor_at", "worker", "worker", "lease_ms", "events", "ready", "control", "taken"}
	end := ";"
	if keyed {
		// As the engine's keyed claims (store.TaskFinishAndClaim).
		claimQuery = st.KeyedClaimStatement()
		args = []string{"queues", "limits", "floor_p", "floor_at", "keyed_floor", "worker", "after", "worker", "lease_ms", "events", "ready", "control", "taken"}
		// The cursor: the last key this claim visited, as a one-element
		// text[] (pgbench passes variables as parameters).
		end = " \\aset\nSELECT ARRAY[:after_key]::text AS after \\gset"
	}
	claim, err := pgbenchVars(claimQuery, args...)
	if err != nil {
		return Script{}, fmt.Errorf("render the claim statement: %w", err)
	}
	claim += end
	gather := `SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'to_status', 'completed', 'from_status', status, 'attempt', attempt) ORDER BY id), '[]') AS items
FROM "` + st.Schema() + `".tasks
WHERE status IN ('running', 'deferred') AND lease_expires_at = now() + :lease_ms * interval '1 millisecond' AND worker_id = :worker \gset`
	text := `\set worker :client_id + 1
BEGIN;
` + transition + `;
` + claim + `
` + gather + `
COMMIT;
`
	vars := map[string]string{
		"items":  "[]",
		"queues": "{" + p.Queue + "}",
		"limits": "{" + strconv.Itoa(p.Batch) + "}",
		// No claim floor (see store.ClaimFloor): the scan starts at the start.
		"floor_p":  "{" + strconv.Itoa(math.MinInt32) + "}",
		"floor_at": "{0}",
		"lease_ms": strconv.FormatInt(p.Lease.Milliseconds(), 10),
		"events":   st.EventsChannel(),
		"ready":    st.ReadyChannel(),
		"control":  st.ControlChannel(),
		"taken":    "false",
	}
	if keyed {
		// No keyed floor, and the first turn starts at the first key.
		vars["keyed_floor"], vars["after"] = "{0}", `{""}`
	}
	return Script{Text: text, Vars: vars}, nil
}

// Bare renders the floor under Cairn: the same task row
// updates (running to completed for this worker's previous batch, then
// ready to running for the next, with SKIP LOCKED in the claim's order)
// and nothing else: no events, no run rows, no NOTIFY. A client finds its
// previous batch by the lease the claim gave it (one index lookup, as
// every task of a claim shares the transaction's now()). The candidates
// are a materialized CTE, as in the store's claim: a LIMIT ... SKIP LOCKED
// subquery on the inner side of a nested loop would be scanned again per
// outer row, each time locking the next batch.
func Bare(st *store.Store, p Params) (Script, error) {
	if err := p.check(); err != nil {
		return Script{}, err
	}
	tasks := `"` + st.Schema() + `".tasks`
	text := `\set worker :client_id + 1
BEGIN;
UPDATE ` + tasks + ` SET status = 'completed', worker_id = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
WHERE status IN ('running', 'deferred') AND lease_expires_at = :lease_at::timestamptz AND worker_id = :worker;
WITH c AS MATERIALIZED (
	SELECT id FROM ` + tasks + ` WHERE status = 'ready' AND fair_key IS NULL AND queue = :queue AND available_at <= now()
	ORDER BY priority, available_at, id LIMIT ` + strconv.Itoa(p.Batch) + ` FOR UPDATE SKIP LOCKED
)
UPDATE ` + tasks + ` t SET status = 'running', attempt = t.attempt + 1, worker_id = :worker,
	lease_expires_at = now() + :lease_ms * interval '1 millisecond', started_at = now(),
	first_started_at = coalesce(t.first_started_at, now()), updated_at = now()
FROM c WHERE t.id = c.id AND (t.status = 'ready') IS TRUE;
SELECT now() + :lease_ms * interval '1 millisecond' AS lease_at \gset
COMMIT;
`
	return Script{Text: text, Vars: map[string]string{
		"queue":    p.Queue,
		"lease_ms": strconv.FormatInt(p.Lease.Milliseconds(), 10),
		"lease_at": "1970-01-01 00:00:00+00",
	}}, nil
}

// pgbenchVars rewrites a statement in positional form ($1, $2...) for a
// pgbench script: $n becomes :names[n-1] and -- comments are dropped
// (pgbench would read a colon in them as a variable). It fails unless the
// statement takes exactly len(names) parameters.
func pgbenchVars(query string, names ...string) (string, error) {
	highest := 0
	out, err := sqltext.Rewrite(query, false, '$', func(rest string) (string, int, error) {
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(rest[1:j])
		if err != nil || n < 1 || n > len(names) {
			return "", 0, fmt.Errorf("parameter %q at offset %d: the statement takes other parameters than %s",
				rest[:j], len(query)-len(rest), strings.Join(names, ", "))
		}
		highest = max(highest, n)
		return ":" + names[n-1], j, nil
	})
	if err != nil {
		return "", err
	}
	if highest != len(names) {
		return "", fmt.Errorf("the statement takes %d parameters, not %d (%s)", highest, len(names), strings.Join(names, ", "))
	}
	return strings.TrimSpace(out), nil
}
