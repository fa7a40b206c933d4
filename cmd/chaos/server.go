package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// server is where scenarios make their databases: DATABASE_URL's server
// or a private cluster.
type server struct {
	url     string // maintenance database
	cluster *pgcluster.Cluster
	dir     string
	srv     *benchdb.Server
}

// clusterSettings are the private clusters' settings: fast, but with
// commits durable against a crash of the server (with synchronous_commit
// off an acknowledged claim can vanish in a crash and its task rightly run
// again), and few connection slots, so that pool exhaustion is quick.
var clusterSettings = map[string]string{"synchronous_commit": "on", "max_connections": "100"}

func openServer(ctx context.Context, o options, logger *slog.Logger) (*server, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" && !o.private {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
			return nil, errors.New("DATABASE_URL must be a postgres:// URL")
		}
		if !loopback(p.Hostname()) {
			return nil, fmt.Errorf("DATABASE_URL's host %q is not this machine: the suite kills, exhausts and cuts off its server, so it runs on loopback only", p.Hostname())
		}
		srv, err := benchdb.Connect(ctx, u)
		if err != nil {
			return nil, err
		}
		return &server{url: u, srv: srv}, nil
	}
	return startCluster(ctx, logger)
}

// startCluster starts a private cluster of its own.
func startCluster(ctx context.Context, logger *slog.Logger) (*server, error) {
	dir, err := os.MkdirTemp("", "cairn-chaos-pg-")
	if err != nil {
		return nil, err
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Fast: true, Settings: clusterSettings, Logger: logger})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv, err := benchdb.Connect(ctx, c.URL("postgres"))
	if err != nil {
		_ = c.Remove()
		os.RemoveAll(dir)
		return nil, err
	}
	return &server{url: c.URL("postgres"), cluster: c, dir: dir, srv: srv}, nil
}

func (s *server) close() {
	s.srv.Close()
	if s.cluster != nil {
		_ = s.cluster.Remove()
		os.RemoveAll(s.dir)
	}
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withApp returns u with application_name app, and with host hostport
// when not empty: a worker's proxy, which reads the protocol in clear
// (sslmode=disable).
func withApp(u, hostport, app string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	q := p.Query()
	if hostport != "" {
		p.Host = hostport
		q.Set("sslmode", "disable")
	}
	q.Set("application_name", app)
	p.RawQuery = q.Encode()
	return p.String(), nil
}
