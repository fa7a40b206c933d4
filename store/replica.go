package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ReplicaStatus is what a server says of its part in streaming
// replication.
type ReplicaStatus struct {
	// InRecovery is true on a standby (a read replica).
	InRecovery bool
	// ReplayPaused is true while a standby's replay is paused
	// (pg_wal_replay_pause).
	ReplayPaused bool
	// SinceReplay is how long ago the last replayed transaction committed
	// on the primary: the replica's lag while the primary is busy, and
	// growing with no lag at all while it is idle. Zero when not in
	// recovery or nothing was replayed yet.
	SinceReplay time.Duration
}

// ReplicaStatusGet reports whether the store's server is a standby, and
// how far behind it is.
func (s *Store) ReplicaStatusGet(ctx context.Context) (ReplicaStatus, error) {
	var (
		out   ReplicaStatus
		since sql.NullFloat64
	)
	err := s.raw(`SELECT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END,
		CASE WHEN pg_is_in_recovery() THEN extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END`).
		Scan(ctx, &out.InRecovery, &out.ReplayPaused, &since)
	if err != nil {
		return out, fmt.Errorf("read replication status: %w", err)
	}
	if since.Valid && since.Float64 > 0 {
		out.SinceReplay = time.Duration(since.Float64 * float64(time.Second))
	}
	return out, nil
}
