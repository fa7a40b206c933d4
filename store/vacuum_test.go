package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestHorizonNamesTheOldestSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h, err := b.st.Horizon(ctx)
	require.NoError(t, err)
	require.Empty(t, h.Xmin, "an idle database holds no snapshot: %+v", h)

	pid, release := b.db.HoldSnapshot(t)
	h, err = b.st.Horizon(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, h.Xmin)
	require.Equal(t, "session", h.Kind)
	require.True(t, strings.HasPrefix(h.Holder, fmt.Sprintf("pid %d (", pid)), "holder %q, want pid %d", h.Holder, pid)
	require.Contains(t, h.Holder, "idle in transaction")
	require.False(t, h.Since.IsZero())
	require.Positive(t, h.For)
	require.Less(t, h.For, time.Minute)

	all, err := b.st.SeesAllSessions(ctx)
	require.NoError(t, err)
	require.True(t, all, "the tests connect as a superuser")

	// A snapshot taken later holds the same xmin or a younger one: the
	// transaction open longest is named either way.
	_, releaseLater := b.db.HoldSnapshot(t)
	h, err = b.st.Horizon(ctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(h.Holder, fmt.Sprintf("pid %d (", pid)), "holder %q, want pid %d", h.Holder, pid)
	releaseLater()

	release()
	h, err = b.st.Horizon(ctx)
	require.NoError(t, err)
	require.Empty(t, h.Xmin, "the snapshot ended: %+v", h)
}

func TestVacuumHotVacuumsTablesPastTheTriggerAndTakesTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(200))
	require.NoError(t, err)
	b.db.Churn(t, "tasks", 3)

	// Another process holds the turn: nothing is vacuumed.
	conn, err := b.db.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, b.st.VacuumLockKey())
	require.NoError(t, err)
	_, err = b.st.VacuumHot(ctx)
	require.ErrorIs(t, err, store.ErrVacuumBusy)
	vacuums, _ := b.db.TableVacuums(t, "tasks")
	require.Zero(t, vacuums)
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, b.st.VacuumLockKey())
	require.NoError(t, err)

	done, err := b.st.VacuumHot(ctx)
	require.NoError(t, err)
	var tables []string
	for _, v := range done {
		tables = append(tables, v.Table)
		if v.Table == "tasks" {
			require.GreaterOrEqual(t, v.Dead, int64(600))
		}
	}
	require.Contains(t, tables, "tasks")
	require.NotContains(t, tables, "flow_keys", "flow_keys has no dead versions")
	vacuums, dead := b.db.TableVacuums(t, "tasks")
	require.Equal(t, int64(1), vacuums)
	require.Zero(t, dead, "no snapshot held them")

	// Nothing is past the trigger any more; the lock was given back.
	done, err = b.st.VacuumHot(ctx)
	require.NoError(t, err)
	require.Empty(t, done)
	var free bool
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, b.st.VacuumLockKey()).Scan(&free))
	require.True(t, free, "VacuumHot kept its lock")
}

// TestVacuumHotLeavesItsConnectionAsItFoundIt: the pooled connection
// VacuumHot used holds neither its lock nor its cost delay after.
func TestVacuumHotLeavesItsConnectionAsItFoundIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(100))
	require.NoError(t, err)
	b.db.Churn(t, "tasks", 2)

	one, err := sql.Open("postgres", b.db.URL)
	require.NoError(t, err)
	defer one.Close()
	one.SetMaxOpenConns(1)
	st, err := store.New(one, pgtest.Schema)
	require.NoError(t, err)
	done, err := st.VacuumHot(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, done)

	var delay string
	require.NoError(t, one.QueryRow(`SHOW vacuum_cost_delay`).Scan(&delay))
	require.Equal(t, "0", delay)
	var locks int
	require.NoError(t, one.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks))
	require.Zero(t, locks)
}

// TestHorizonNamesAReplicationSlotAndWhetherItsStandbyIsConnected: a
// standby with hot_standby_feedback on a physical slot holds the
// primary's horizon through the slot; once the standby is gone the slot
// keeps holding it, inactive.
func TestHorizonNamesAReplicationSlotAndWhetherItsStandbyIsConnected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The standby asks for its slot until the slot exists (every 5 s,
	// wal_retrieve_retry_interval).
	p := pgtest.StartPair(t, map[string]string{"primary_slot_name": "cairn_standby", "hot_standby_feedback": "on"})
	pdb, err := store.Open(ctx, p.Primary.URL("postgres"), 30*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { pdb.Close() })
	st, err := store.New(pdb, "cairn")
	require.NoError(t, err)
	_, err = pdb.ExecContext(ctx, `SELECT pg_create_physical_replication_slot('cairn_standby')`)
	require.NoError(t, err)
	var h store.Horizon
	require.Eventually(t, func() bool {
		h, err = st.Horizon(ctx)
		return err == nil && h.Kind == store.HorizonSlot
	}, time.Minute, 20*time.Millisecond, "the standby's feedback does not hold the horizon through its slot: %+v, %v", h, err)
	require.Equal(t, "cairn_standby", h.Holder)
	require.NotEmpty(t, h.Xmin)
	require.False(t, h.Inactive, "the standby is connected")
	require.True(t, h.Since.IsZero(), "a slot has no transaction start")

	require.NoError(t, p.StopStandby())
	require.Eventually(t, func() bool {
		h, err = st.Horizon(ctx)
		return err == nil && h.Inactive
	}, time.Minute, 20*time.Millisecond, "the slot is not seen inactive after its standby stopped: %+v, %v", h, err)
	require.Equal(t, store.HorizonSlot, h.Kind)
	require.Equal(t, "cairn_standby", h.Holder)
	require.NotEmpty(t, h.Xmin, "an inactive slot keeps the xmin its standby last reported")
}
