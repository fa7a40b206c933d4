// Package pgcluster starts and stops a private PostgreSQL cluster from the
// machine's PostgreSQL binaries, for `make run` and for tests when no
// DATABASE_URL is given.
//
// Binaries are found on PATH or under /usr/lib/postgresql/*/bin (highest
// version). When none exist and this is Debian and we are root, they are
// installed with apt-get; otherwise Start fails with a message naming what
// to install. As root the server runs as the "postgres" OS user.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoPostgres is returned when no PostgreSQL server binaries can be found
// or installed.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set DATABASE_URL")

// Options configure a cluster.
type Options struct {
	// Dir holds the data directory (Dir/data), the server log and the
	// port the cluster listens on (Dir/port, kept from one start to the
	// next). Created when missing; an existing cluster in it is reused.
	Dir string
	// Fast turns off fsync and synchronous_commit: for throwaway test
	// clusters only.
	Fast bool
	// Settings are extra server settings (-c name=value).
	Settings map[string]string
	// Logger receives progress. Defaults to a discarding logger.
	Logger *slog.Logger
}

// Cluster is a running private PostgreSQL server.
type Cluster struct {
	opts Options
	bin  string
	cred *syscall.Credential
	data string
	Port int
}

// URL returns a connection URL for database db on the cluster.
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Start initialises (when needed) and starts a cluster in opts.Dir.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	bin, err := FindBinaries(ctx, opts.Logger)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, bin: bin, data: filepath.Join(opts.Dir, "data")}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a \"postgres\" OS user to run the server: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Parents must be traversable by the postgres user; the cluster
	// directory itself is private to it.
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); err != nil {
		opts.Logger.InfoContext(ctx, "initialising private PostgreSQL cluster", slog.String("dir", c.data))
		if out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
			return nil, fmt.Errorf("initdb %s: %w\n%s", c.data, err, out)
		}
	}
	// A stale postmaster.pid from a killed server blocks start; pg_ctl
	// handles a dead pid itself, so only a live server is an error.
	//
	// The port is kept in Dir/port, so the cluster keeps its address
	// from one start to the next; when that port is taken, another one is
	// chosen and kept instead.
	saved := c.savedPort()
	var lastErr error
	for i := range 5 {
		port := saved
		if i > 0 || saved == 0 || !portFree(saved) {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		c.Port = port
		if lastErr = c.start(ctx); lastErr != nil {
			continue
		}
		if port != saved {
			if err := c.savePort(); err != nil {
				opts.Logger.WarnContext(ctx, "cannot keep the private PostgreSQL's port", slog.String("error", err.Error()))
			}
			if saved != 0 {
				opts.Logger.WarnContext(ctx, "the private PostgreSQL's port was taken: it moved to another port, kept from now on",
					slog.Int("was", saved), slog.Int("port", port), slog.String("file", filepath.Join(opts.Dir, portFile)))
			}
		}
		opts.Logger.InfoContext(ctx, "private PostgreSQL started", slog.Int("port", port), slog.String("dir", c.data))
		return c, nil
	}
	return nil, lastErr
}

// portFile, in Options.Dir, keeps the port of the cluster between starts.
const portFile = "port"

// savedPort returns the port kept in Dir/port, or 0.
func (c *Cluster) savedPort() int {
	b, err := os.ReadFile(filepath.Join(c.opts.Dir, portFile))
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || port <= 0 || port > 65535 {
		return 0
	}
	return port
}

// savePort keeps c.Port in Dir/port.
func (c *Cluster) savePort() error {
	return os.WriteFile(filepath.Join(c.opts.Dir, portFile), []byte(strconv.Itoa(c.Port)+"\n"), 0o644)
}

// portFree reports whether nothing listens on 127.0.0.1:port.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func (c *Cluster) start(ctx context.Context) error {
	o := []string{"-p", strconv.Itoa(c.Port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=''", "-c", "max_connections=400"}
	if c.opts.Fast {
		o = append(o, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	keys := make([]string, 0, len(c.opts.Settings))
	for k := range c.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o = append(o, "-c", k+"="+c.opts.Settings[k])
	}
	logFile := filepath.Join(c.opts.Dir, "server.log")
	out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", logFile, "-w", "-t", "60", "-o", strings.Join(o, " "), "start")
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tail)
	}
	return nil
}

// StartStandby makes a streaming-replication standby of c in opts.Dir and
// starts it: pg_basebackup copies c (-R writes the standby settings, -X
// stream brings the WAL written during the copy), then the copy starts on
// a free port as a hot standby and Start's settings apply. It returns once
// the standby accepts read-only connections; it replays c's changes from
// then on. c needs a replication line for 127.0.0.1 in pg_hba.conf, which
// initdb writes (trust, like the private cluster's other lines). Stop or
// Remove the standby before its primary.
func (c *Cluster) StartStandby(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Cluster{opts: opts, bin: c.bin, cred: c.cred, data: filepath.Join(opts.Dir, "data")}
	if err := s.makeDir(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(s.data, "PG_VERSION")); err == nil {
		return nil, fmt.Errorf("standby directory %s already holds a cluster: give an empty directory", s.data)
	}
	opts.Logger.InfoContext(ctx, "copying the primary for a standby", slog.Int("primary_port", c.Port), slog.String("dir", s.data))
	src := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres sslmode=disable", c.Port)
	if out, err := s.run(ctx, "pg_basebackup", "-D", s.data, "-d", src, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d into %s: %w\n%s", c.Port, s.data, err, out)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.Port = port
		if lastErr = s.start(ctx); lastErr == nil {
			opts.Logger.InfoContext(ctx, "standby started", slog.Int("port", port), slog.Int("primary_port", c.Port), slog.String("dir", s.data))
			return s, nil
		}
	}
	return nil, lastErr
}

// makeDir creates opts.Dir private to the user the server runs as; its
// parents must be traversable by that user.
func (c *Cluster) makeDir() error {
	dir := c.opts.Dir
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s to postgres: %w", dir, err)
		}
	}
	return nil
}

// Stop shuts the server down (fast mode: sessions are disconnected).
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	c.opts.Logger.Info("private PostgreSQL stopped", slog.String("dir", c.data))
	return nil
}

// StopImmediate stops the server the way a crash would (pg_ctl stop -m
// immediate): sessions are cut without a shutdown checkpoint, and the next
// start runs crash recovery. Start it again with StartAgain.
func (c *Cluster) StopImmediate() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w\n%s", err, out)
	}
	c.opts.Logger.Info("private PostgreSQL stopped (immediate)", slog.String("dir", c.data))
	return nil
}

// StartAgain starts a stopped server on the same port and waits until it
// accepts connections.
func (c *Cluster) StartAgain(ctx context.Context) error {
	return c.start(ctx)
}

// Restart stops and starts the server on the same port.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.start(ctx)
}

// Remove stops the server if needed and deletes its directory.
func (c *Cluster) Remove() error {
	err := c.Stop()
	if rmErr := os.RemoveAll(c.opts.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.opts.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	// pg_ctl leaves the server running with our pipes; use files instead
	// so Wait does not block on the postmaster's inherited descriptors.
	if name == "pg_ctl" {
		f, err := os.CreateTemp("", "pgctl-*.out")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if c.cred != nil {
			_ = f.Chown(int(c.cred.Uid), int(c.cred.Gid))
		}
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		out, _ := os.ReadFile(f.Name())
		return out, err
	}
	err := cmd.Run()
	return buf.Bytes(), err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FindBinaries returns the directory holding initdb and pg_ctl, installing
// PostgreSQL with apt-get when they are missing on Debian as root.
func FindBinaries(ctx context.Context, logger *slog.Logger) (string, error) {
	if dir := lookup(); dir != "" {
		return dir, nil
	}
	if err := AptInstall(ctx, logger, ErrNoPostgres, func() bool { return lookup() != "" }, "postgresql"); err != nil {
		return "", err
	}
	if dir := lookup(); dir != "" {
		return dir, nil
	}
	return "", ErrNoPostgres
}

func lookup() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(real)
			}
			return filepath.Dir(p)
		}
	}
	return newestDebianBin("pg_ctl")
}

// newestDebianBin returns the highest-version /usr/lib/postgresql/*/bin
// directory that holds program, or "".
func newestDebianBin(program string) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, program)); err == nil && v > bestV {
			best, bestV = d, v
		}
	}
	return best
}

// Program returns the path of the cluster's own copy of a PostgreSQL
// program (pgbench, psql...), from the directory its server runs from.
func (c *Cluster) Program(name string) (string, error) {
	p := filepath.Join(c.bin, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not next to the cluster's server binaries: %w", name, err)
	}
	return p, nil
}

// FindProgram returns the path of a PostgreSQL program (pgbench, psql...)
// for a server this package did not start: on PATH, else under
// /usr/lib/postgresql/*/bin (highest version).
func FindProgram(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if d := newestDebianBin(name); d != "" {
		return filepath.Join(d, name), nil
	}
	return "", fmt.Errorf("%s not found on PATH or under /usr/lib/postgresql/*/bin: install the PostgreSQL client programs (Debian: apt-get install postgresql, which ships pgbench)", name)
}

// AptInstall installs Debian packages as root, serialised across processes
// by a file lock. have reports whether the software is there already (it is
// asked again once the lock is held, as another process may have installed
// it meanwhile). Where this is not Debian or we are not root it returns
// missing, which should say what to install.
func AptInstall(ctx context.Context, logger *slog.Logger, missing error, have func() bool, pkgs ...string) error {
	if _, err := os.Stat("/etc/debian_version"); err != nil || os.Geteuid() != 0 {
		return missing
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "cairn-apt.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if have() {
		return nil // another process installed it while we waited
	}
	logger.InfoContext(ctx, "installing with apt-get", slog.String("packages", strings.Join(pkgs, " ")))
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", args[0], err, lastLines(out, 20))
		}
	}
	return nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
