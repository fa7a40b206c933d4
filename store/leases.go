package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Lease is a row of leases: a named leader lease.
type Lease struct {
	bun.BaseModel `bun:"table:leases"`

	Name       string    `bun:"name,pk" json:"name"`
	Holder     string    `bun:"holder" json:"holder"`
	ExpiresAt  time.Time `bun:"expires_at" json:"expires_at"`
	AcquiredAt time.Time `bun:"acquired_at" json:"acquired_at"`
}

// LeaseAcquireParams asks for, or renews, a named lease.
type LeaseAcquireParams struct {
	Name   string
	Holder string
	// Now is the caller's clock; the lease is free when it expired before Now.
	Now time.Time
	// TTL is how long the lease lasts from Now.
	TTL time.Duration
}

// LeaseAcquire takes the lease when it is free or expired, or renews it
// when p.Holder already holds it, in one statement. It reports whether
// p.Holder holds the lease now.
func (s *Store) LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) (bool, error) {
	var holder string
	err := s.raw(`
INSERT INTO ?schema.leases AS l (name, holder, expires_at, acquired_at) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
	holder = excluded.holder, expires_at = excluded.expires_at,
	acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at ELSE excluded.acquired_at END
WHERE l.holder = excluded.holder OR l.expires_at < ?
RETURNING holder`, p.Name, p.Holder, p.Now.Add(p.TTL), p.Now, p.Now).Scan(ctx, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire lease %q: %w", p.Name, err)
	}
	return holder == p.Holder, nil
}

// LeaseRelease gives the lease up if holder holds it.
func (s *Store) LeaseRelease(ctx context.Context, name, holder string) error {
	if _, err := s.exec(ctx, `DELETE FROM ?schema.leases WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fmt.Errorf("release lease %q: %w", name, err)
	}
	return nil
}

// LeaseGet returns the lease named name (which may have expired).
func (s *Store) LeaseGet(ctx context.Context, name string) (*Lease, error) {
	var l Lease
	if err := s.raw(`SELECT * FROM ?schema.leases WHERE name = ?`, name).Scan(ctx, &l); err != nil {
		return nil, notFound(err)
	}
	return &l, nil
}
