package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"
)

// HoldSnapshot opens a REPEATABLE READ transaction that has read the
// tasks table, on a connection of its own: it holds back vacuum (the
// database's horizon) until release, which t's cleanup also calls. It
// returns the connection's pid.
func (d *DB) HoldSnapshot(t testing.TB) (pid int, release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := d.SQL.Conn(ctx)
	if err != nil {
		t.Fatalf("pgtest: hold a snapshot: %v", err)
	}
	var tx *sql.Tx
	err = conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	if err == nil {
		tx, err = conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	}
	if err == nil {
		var n int
		err = tx.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s.tasks`, Schema)).Scan(&n)
	}
	if err != nil {
		conn.Close()
		t.Fatalf("pgtest: hold a snapshot: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Commit(); err != nil {
				t.Errorf("pgtest: release the snapshot: %v", err)
			}
			conn.Close()
		})
	}
	t.Cleanup(release)
	return pid, release
}

// TableVacuums returns how many manual VACUUMs table of the schema has
// had and its dead row versions, as the statistics count them.
func (d *DB) TableVacuums(t testing.TB, table string) (vacuums, dead int64) {
	t.Helper()
	err := d.SQL.QueryRow(`SELECT vacuum_count, n_dead_tup FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname = $2`, Schema, table).Scan(&vacuums, &dead)
	if err != nil {
		t.Fatalf("pgtest: statistics of %s: %v", table, err)
	}
	return vacuums, dead
}

// Churn updates every row of table rounds times, under a held snapshot
// (without one, pruning would remove the old versions as it goes), and
// waits until the statistics count the dead versions. It turns off
// autovacuum for table, so that they stay until the test vacuums.
func (d *DB) Churn(t testing.TB, table string, rounds int) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.SQL.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s.%s SET (autovacuum_enabled = false)`, Schema, table)); err != nil {
		t.Fatalf("pgtest: churn %s: %v", table, err)
	}
	_, release := d.HoldSnapshot(t)
	defer release()
	conn, err := d.SQL.Conn(ctx)
	if err != nil {
		t.Fatalf("pgtest: churn %s: %v", table, err)
	}
	defer conn.Close()
	var rows int64
	for range rounds {
		res, err := conn.ExecContext(ctx, fmt.Sprintf(`UPDATE %s.%s SET id = id`, Schema, table))
		if err == nil {
			rows, err = res.RowsAffected()
		}
		if err != nil {
			t.Fatalf("pgtest: churn %s: %v", table, err)
		}
	}
	// The updates' statistics reach the shared counts when the session
	// next goes idle.
	if _, err := conn.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatalf("pgtest: churn %s: %v", table, err)
	}
	want := rows * int64(rounds)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, dead := d.TableVacuums(t, table); dead >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: churn %s: the statistics never counted %d dead versions", table, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
