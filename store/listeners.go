package store

import (
	"context"
	"fmt"
	"time"
)

// Statements announce transitions on the events channel only while some
// process listens for them: a row of event_listeners that has not
// expired. NOTIFY takes a cluster-wide lock from the start of the commit
// to its end (PostgreSQL keeps its notification queue in commit order),
// so concurrent commits that notify cannot share a WAL flush; measured,
// that lock was the wait of 12-15% of the active backends in the bloat
// scenario (see README, "NOTIFY's commit lock, measured again at full
// size"). The check is an uncorrelated EXISTS: one InitPlan per
// statement. The ready and control channels are not gated: workers listen
// on them always (enqueues announce theirs after the commit when they
// come together; see the engine's waker).

// EventListenerKeep records that holder listens on the events channel,
// for ttl from now on the database's clock: statements that start after
// it commits announce their transitions. A listener calls it again well
// within ttl while it listens. It also deletes other holders' expired
// rows.
func (s *Store) EventListenerKeep(ctx context.Context, holder string, ttl time.Duration) error {
	if _, err := s.exec(ctx, `
WITH gone AS (
	DELETE FROM ?schema.event_listeners WHERE expires_at < now() AND holder <> ?
)
INSERT INTO ?schema.event_listeners AS l (holder, expires_at)
VALUES (?, now() + make_interval(secs => ?))
ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at`,
		holder, holder, ttl.Seconds()); err != nil {
		return fmt.Errorf("keep event listener %q: %w", holder, err)
	}
	return nil
}

// EventListenerDrop deletes holder's row: it no longer listens.
func (s *Store) EventListenerDrop(ctx context.Context, holder string) error {
	if _, err := s.exec(ctx, `DELETE FROM ?schema.event_listeners WHERE holder = ?`, holder); err != nil {
		return fmt.Errorf("drop event listener %q: %w", holder, err)
	}
	return nil
}

// EventsListened reports whether a process listens for events now (the
// condition statements check before they announce).
func (s *Store) EventsListened(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.raw(`SELECT EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())`).Scan(ctx, &ok); err != nil {
		return false, fmt.Errorf("read event listeners: %w", err)
	}
	return ok, nil
}
