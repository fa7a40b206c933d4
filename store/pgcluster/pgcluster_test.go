package pgcluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartKeepsPort starts a cluster twice in one directory: the second
// start listens on the port the first one chose. When that port is taken,
// the next start moves to another one and keeps it.
func TestStartKeepsPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "pg")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is private to us; as root the server runs as
	// "postgres", which must reach dir.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{Dir: dir, Fast: true}

	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	first := c.Port
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		t.Fatalf("port file: %v", err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(first) {
		t.Fatalf("port file holds %q, want %d", got, first)
	}

	c, err = Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != first {
		t.Fatalf("second start on port %d, want the first start's %d", c.Port, first)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}

	// Someone else takes the port: the next start moves and keeps the
	// new port.
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err = Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove() //nolint:errcheck
	if c.Port == first {
		t.Fatalf("started on the taken port %d", first)
	}
	b, err = os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(c.Port) {
		t.Fatalf("port file holds %q after the move, want %d", got, c.Port)
	}
}
