package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// The vacuum horizon. Vacuum removes a dead row version only once no
// snapshot can still see it, so the oldest snapshot of the database (a
// long report, a session idle in transaction, a replica's
// hot_standby_feedback, a replication slot, a prepared transaction) holds
// back the cleanup of every table. While it is held, each claim and
// completion leaves row versions and index entries behind in tasks and
// runs. Autovacuum comes back to them only at its next round after the
// holder is gone (autovacuum_naptime, a minute by default), so the engine
// vacuums them itself at that moment (see the engine's horizon watch).

// HorizonSlot is the Kind of a Horizon held by a replication slot (a
// literal of Horizon's statement).
const HorizonSlot = "replication slot"

// Horizon is the oldest snapshot that holds back vacuum in this database.
type Horizon struct {
	// Xmin is the transaction id it holds vacuum at, "" when no snapshot
	// is open (other than the caller's own).
	Xmin string
	// Age is how many transactions began since Xmin.
	Age int64
	// Kind is what holds it: "session", HorizonSlot or "prepared
	// transaction".
	Kind string
	// Holder names it: the session's pid, application and state, the
	// slot's or the prepared transaction's name.
	Holder string
	// Since is when the holder's transaction began (sessions and
	// prepared transactions; zero for slots), and For how long ago that
	// was on the database's clock.
	Since time.Time
	For   time.Duration
	// Inactive is set for a replication slot that no standby or client
	// is connected to: it holds the horizon where it is until its
	// consumer comes back or the slot is dropped, however long that is.
	Inactive bool
}

// Horizon returns the oldest snapshot of this database that holds back
// vacuum; of holders at the same xmin, the transaction open longest. It
// reads pg_stat_activity: a role that is neither a superuser
// nor a member of pg_read_all_stats sees only its own sessions' snapshots
// there (see SeesAllSessions).
func (s *Store) Horizon(ctx context.Context) (Horizon, error) {
	var h Horizon
	var since sql.NullTime
	var secs float64
	err := s.raw(`
WITH held AS (
	SELECT backend_xmin AS xmin, 'session' AS kind,
		format('pid %s (%s%s)', pid, coalesce(nullif(application_name, ''), backend_type),
			coalesce(', ' || state, '')) AS holder,
		xact_start AS since, false AS inactive
	FROM pg_stat_activity
	WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
		AND (datname = current_database() OR backend_type = 'walsender')
	UNION ALL
	SELECT xmin, 'replication slot', slot_name::text, NULL, NOT active
	FROM pg_replication_slots
	WHERE xmin IS NOT NULL AND (database IS NULL OR database = current_database())
	UNION ALL
	SELECT transaction, 'prepared transaction', gid, prepared, false
	FROM pg_prepared_xacts
	WHERE database = current_database()
)
SELECT xmin::text, age(xmin), kind, holder, since, coalesce(extract(epoch FROM now() - since), 0)::float8, inactive
FROM held ORDER BY age(xmin) DESC, since NULLS LAST LIMIT 1`).
		Scan(ctx, &h.Xmin, &h.Age, &h.Kind, &h.Holder, &since, &secs, &h.Inactive)
	if errors.Is(err, sql.ErrNoRows) {
		return Horizon{}, nil
	}
	if err != nil {
		return Horizon{}, fmt.Errorf("read the vacuum horizon: %w", err)
	}
	h.Since, h.For = since.Time, time.Duration(secs*float64(time.Second))
	return h, nil
}

// SeesAllSessions reports whether the store's role sees the snapshots
// of other roles' sessions (a superuser or a member of
// pg_read_all_stats, which pg_monitor includes).
func (s *Store) SeesAllSessions(ctx context.Context) (bool, error) {
	var ok bool
	err := s.raw(`SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
		FROM pg_roles WHERE rolname = current_user`).Scan(ctx, &ok)
	if err != nil {
		return false, fmt.Errorf("read the role's privileges: %w", err)
	}
	return ok, nil
}

// hotTables are the tables that every claim and transition updates,
// which pile up dead row versions while the horizon is held.
var hotTables = []string{"tasks", "run_rows", "flow_keys"}

// hotVacuum are the statements that vacuum the hot tables, by table.
var hotVacuum = map[string]string{
	"tasks":     `VACUUM ?schema.tasks`,
	"runs":      `VACUUM ?schema.run_rows`,
	"flow_keys": `VACUUM ?schema.flow_keys`,
}

// Vacuumed is one table VacuumHot vacuumed.
type Vacuumed struct {
	Table string
	// Dead is the table's dead row versions before, as the statistics
	// counted them.
	Dead int64
	Took time.Duration
}

// vacuumCostDelay is VacuumHot's cost-based delay: autovacuum's default
// (autovacuum_vacuum_cost_delay), with the default cost limit.
const vacuumCostDelay = `SET vacuum_cost_delay = '2ms'`

// ErrVacuumBusy is returned by VacuumHot while another process of the
// schema vacuums its hot tables.
var ErrVacuumBusy = errors.New("another process is vacuuming the hot tables")

// VacuumHot vacuums each hot table (tasks, runs, flow_keys) whose dead
// row versions are past autovacuum's default trigger (50 and a fifth of
// its live rows), one after the other, at autovacuum's default speed
// (vacuumCostDelay), and returns what it vacuumed.
// Processes of one schema take turns: while one vacuums, the others get
// ErrVacuumBusy. A VACUUM that waits for an autovacuum of the same table
// cancels it after deadlock_timeout (PostgreSQL does so for any lock an
// autovacuum blocks), so a pass that began before the horizon moved does
// not delay this one.
func (s *Store) VacuumHot(ctx context.Context) (done []Vacuumed, err error) {
	took, err := s.sessionLocked(ctx, "vacuum", []string{`RESET vacuum_cost_delay`}, func(pinned *Store) error {
		done, err = pinned.vacuumHot(ctx)
		return err
	})
	switch {
	case err != nil && !took:
		return nil, fmt.Errorf("vacuum the hot tables: %w", err)
	case !took:
		return nil, ErrVacuumBusy
	}
	return done, err
}

// vacuumHot is VacuumHot on its pinned connection, holding the lock.
func (s *Store) vacuumHot(ctx context.Context) (done []Vacuumed, err error) {
	// As gentle on the disks as autovacuum's default: a manual VACUUM
	// is not throttled at all.
	if _, err := s.exec(ctx, vacuumCostDelay); err != nil {
		return nil, fmt.Errorf("vacuum the hot tables: %w", err)
	}
	type due struct {
		Table string `bun:"relname"`
		Dead  int64  `bun:"n_dead_tup"`
	}
	var tables []due
	if err := s.raw(`
SELECT relname, n_dead_tup FROM pg_stat_user_tables
WHERE schemaname = ? AND relname IN (?) AND n_dead_tup > 50 + 0.2 * n_live_tup
ORDER BY relname DESC`, s.schema, bun.In(hotTables)).Scan(ctx, &tables); err != nil {
		return nil, fmt.Errorf("vacuum the hot tables: read their statistics: %w", err)
	}
	for _, t := range tables {
		start := time.Now()
		if _, err := s.exec(ctx, hotVacuum[t.Table]); err != nil {
			return done, fmt.Errorf("vacuum %s: %w", t.Table, err)
		}
		done = append(done, Vacuumed{Table: t.Table, Dead: t.Dead, Took: time.Since(start)})
	}
	return done, nil
}

// sessionLocked runs fn on one connection of the pool (for statements
// that cannot run in a transaction, such as VACUUM or CREATE INDEX
// CONCURRENTLY) while that session holds the schema's advisory lock
// called name, and reports whether it got the lock: when another process
// holds it, sessionLocked returns (false, nil) at once. The statements
// of reset run before the lock is released (a session's settings and
// locks outlive the call on a pooled connection); when one of them or
// the unlock fails, the connection is thrown away instead.
func (s *Store) sessionLocked(ctx context.Context, name string, reset []string, fn func(pinned *Store) error) (bool, error) {
	if s.inTx {
		return false, errors.New("cannot run in a transaction (VACUUM, CREATE INDEX CONCURRENTLY)")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	pinned := *s
	pinned.conn = conn
	var took bool
	if err := pinned.raw(`SELECT pg_try_advisory_lock(?)`, s.lockKey(name)).Scan(ctx, &took); err != nil {
		return false, fmt.Errorf("take the %s lock: %w", name, err)
	}
	if !took {
		return false, nil
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		var uerr error
		for _, q := range reset {
			if _, uerr = pinned.exec(ctx, q); uerr != nil {
				break
			}
		}
		if uerr == nil {
			_, uerr = pinned.exec(ctx, `SELECT pg_advisory_unlock(?)`, s.lockKey(name))
		}
		if uerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return true, fn(&pinned)
}
