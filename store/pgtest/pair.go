package pgtest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/store/pgcluster"
)

// Pair is a private primary cluster and a streaming standby of it, for
// tests of replicas and replication slots (see StartPair).
type Pair struct {
	Primary, Standby *pgcluster.Cluster
	stopOnce         sync.Once
	stopErr          error
}

// StartPair starts a private primary and a hot standby of it with the
// standby's extra settings (for example primary_slot_name), both as
// throwaway clusters (no fsync), logging warnings to the test. The test
// is skipped where no PostgreSQL server binaries can be found. Both are
// stopped when the test ends, the standby first.
func StartPair(t testing.TB, standby map[string]string) *Pair {
	t.Helper()
	ctx := context.Background()
	base := t.TempDir()
	// As root the clusters run as the "postgres" user, which must be able
	// to reach their directories.
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(base, "primary"), Fast: true, Logger: log})
	if errors.Is(err, pgcluster.ErrNoPostgres) {
		t.Skipf("no PostgreSQL server binaries to start a primary and a standby: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := primary.Stop(); err != nil {
			t.Errorf("stop primary: %v", err)
		}
	})
	p := &Pair{Primary: primary}
	p.Standby, err = primary.StartStandby(ctx, pgcluster.Options{Dir: filepath.Join(base, "standby"), Fast: true, Logger: log, Settings: standby})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the primary's (cleanups run last first)
		if err := p.StopStandby(); err != nil {
			t.Errorf("stop standby: %v", err)
		}
	})
	return p
}

// StopStandby stops the standby (once; later calls return the first
// call's error).
func (p *Pair) StopStandby() error {
	p.stopOnce.Do(func() { p.stopErr = p.Standby.Stop() })
	return p.stopErr
}
