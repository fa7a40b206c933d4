package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// TestOutageBacksOffAndLogsOnce cuts an engine off its database (a TCP
// proxy in between refuses and drops every connection) while a handler
// runs and slots are free, for a fixed window. The claim loop and the
// others wait out a growing backoff instead of retrying at once, the
// engine logs one line when the database goes and one when it is back,
// the attempt that finished during the outage is written after it, and
// new work runs again.
func TestOutageBacksOffAndLogsOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	px := newProxy(t, db.URL)
	sqlDB, err := sql.Open("postgres", px.url)
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })

	logs := newCountingLog(testLogger(t))
	cfg := fastConfig(db, t)
	cfg.DatabaseURL = px.url
	cfg.Logger = slog.New(logs)
	cfg.LeaseDuration = 30 * time.Second // outlives the outage: nothing is rescued
	eng, err := engine.New(sqlDB, cfg)
	require.NoError(t, err)
	started := make(chan struct{}, 10)
	gate := make(chan struct{})
	require.NoError(t, eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(ctx context.Context, th *engine.TaskHandle) error {
			var in struct{ Block bool }
			if err := th.RunInput(&in); err != nil {
				return err
			}
			started <- struct{}{}
			if in.Block {
				<-gate
			}
			return nil
		}}}}))
	start(t, eng)
	// Read the outcome on a pool of its own, not through the proxy.
	direct, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)

	ctx := context.Background()
	blocked, err := eng.Enqueue(ctx, "w", map[string]any{"Block": true})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("handler did not start")
	}

	// Three slots are free: the claim loop keeps trying while it is down.
	before := logs.total()
	px.down()
	select {
	case <-logs.seen("database unreachable"):
	case <-time.After(20 * time.Second):
		t.Fatal(`no "database unreachable" line`)
	}
	claimTries0, allTries0 := engine.FailedTries(eng, "claim:default"), engine.FailedTries(eng, "")
	close(gate) // its completion write fails and backs off too
	const window = 2 * time.Second
	<-time.After(window) // the length of the outage under test, not a wait for a condition
	claimTries := engine.FailedTries(eng, "claim:default") - claimTries0
	allTries := engine.FailedTries(eng, "") - allTries0
	duringOutage := logs.total() - before
	px.up()
	t.Logf("over %s down: %d failed claims, %d failed calls of all loops, %d log lines", window, claimTries, allTries, duringOutage)

	// Without backoff a free slot retries its claim at once: thousands of
	// tries a second. With it, about log2(window/retryMin) + a few.
	require.GreaterOrEqual(t, claimTries, int64(2), "the claim loop keeps trying")
	require.LessOrEqual(t, claimTries, int64(15), "claims while the database is down")
	require.LessOrEqual(t, allTries, int64(100), "database calls of all loops while it is down")
	require.Less(t, duringOutage, 20, "log lines while the database is down")

	select {
	case <-logs.seen("database back"):
	case <-time.After(20 * time.Second):
		t.Fatal(`no "database back" line`)
	}
	run := waitRun(t, direct, blocked.ID, 20*time.Second)
	require.Equal(t, store.RunCompleted, run.Status, "the attempt finished during the outage is written after it")
	require.Equal(t, 1, taskByName(t, direct, blocked.ID, "a").Attempt)

	next, err := eng.Enqueue(ctx, "w", map[string]any{})
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, direct, next.ID, 20*time.Second).Status, "new work runs again")
	require.Equal(t, 1, logs.count("database unreachable"), "one line per outage")
	require.Equal(t, 1, logs.count("database back"))
}

// countingLog passes records on to next and counts them by message.
type countingLog struct {
	next  slog.Handler
	mu    sync.Mutex
	n     int
	byMsg map[string]int
	seens map[string]chan struct{}
}

func newCountingLog(next *slog.Logger) *countingLog {
	return &countingLog{next: next.Handler(), byMsg: map[string]int{}, seens: map[string]chan struct{}{}}
}

func (c *countingLog) Enabled(context.Context, slog.Level) bool { return true }

func (c *countingLog) Handle(ctx context.Context, r slog.Record) error {
	c.mu.Lock()
	c.n++
	c.byMsg[r.Message]++
	if ch, ok := c.seens[r.Message]; ok && c.byMsg[r.Message] == 1 {
		close(ch)
	}
	c.mu.Unlock()
	if c.next.Enabled(ctx, r.Level) {
		return c.next.Handle(ctx, r)
	}
	return nil
}

func (c *countingLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countingLog) WithGroup(string) slog.Handler      { return c }

// seen returns a channel closed once a record with message msg is logged.
func (c *countingLog) seen(msg string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.seens[msg]
	if !ok {
		ch = make(chan struct{})
		if c.byMsg[msg] > 0 {
			close(ch)
		}
		c.seens[msg] = ch
	}
	return ch
}

func (c *countingLog) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byMsg[msg]
}

func (c *countingLog) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// proxy forwards TCP connections to a database server; down closes its
// listening socket (new connections are refused) and every connection,
// up listens again on the same address.
type proxy struct {
	t      testing.TB
	target string
	addr   string
	url    string // the database URL through the proxy

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newProxy(t testing.TB, dbURL string) *proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	p := &proxy{t: t, target: u.Host, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	u.Host = p.addr
	p.url = u.String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *proxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(s, c)
	pipe(c, s)
}

// down refuses new connections and drops the open ones.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// up accepts connections again on the same address.
func (p *proxy) up() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may linger a moment after Close
		if ln, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(10 * time.Millisecond) // retry pacing of a bind, not a test wait
	}
	require.NoError(p.t, err)
	p.serve(ln)
}
