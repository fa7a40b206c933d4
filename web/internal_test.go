package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

func TestParseSearch(t *testing.T) {
	t.Parallel()
	docs := func(q string) []string {
		t.Helper()
		search, err := parseSearch(q)
		require.NoError(t, err, q)
		var out []string
		for _, term := range search.Input {
			alts := make([]string, len(term))
			for i, d := range term {
				alts[i] = string(d)
			}
			out = append(out, strings.Join(alts, " | "))
		}
		return out
	}
	require.Empty(t, docs(""))
	require.Equal(t, []string{`{"customer":"acme"}`}, docs("customer:acme"))
	require.Equal(t, []string{`{"n":42} | {"n":"42"}`}, docs("n:42"))
	require.Equal(t, []string{`{"ok":true} | {"ok":"true"}`}, docs("ok:true"))
	require.Equal(t, []string{`{"name":"ACME Inc"}`, `{"n":1} | {"n":"1"}`}, docs(`  name:"ACME Inc"   n:1 `))
	require.Equal(t, []string{`{"order":{"id":"x-1"}}`}, docs("order.id:x-1"))
	require.Equal(t, []string{`{"tags":["a","b"]} | {"tags":"[\"a\", \"b\"]"}`}, docs(`tags:["a", "b"]`))
	require.Equal(t, []string{`{"q":"say \"hi\""}`}, docs(`q:"say \"hi\""`))
	require.Equal(t, []string{`{"k":"a:b"}`}, docs(`k:a:b`))
	require.Equal(t, []string{`{"key":"x"}`}, docs("input.key:x"), "input. names the input")

	s, err := parseSearch(`#42 key:"order 7" output.total:12 output.meta.tag:* input.a:* 42`)
	require.NoError(t, err)
	require.Equal(t, int64(42), s.ID)
	require.Equal(t, "order 7", *s.Key)
	require.Equal(t, [][]json.RawMessage{{json.RawMessage(`{"total":12}`), json.RawMessage(`{"total":"12"}`)}}, s.Output)
	require.Equal(t, []string{`$."meta"."tag"`}, s.OutputHas)
	require.Equal(t, []string{`$."a"`}, s.InputHas)
	require.Empty(t, s.Input)

	for _, bad := range []string{"word", "k:", `k:"open`, ".a:1", "a..b:1", ":v", strings.Repeat("k:v ", 9),
		"#0", "#x", "1 2", "key:a key:b", "output:1", "input.:1", "output..a:1", "99999999999999999999"} {
		_, err := parseSearch(bad)
		require.Error(t, err, bad)
		st, _ := statusOf(err)
		require.Equal(t, 400, st, bad)
	}
}

func TestLayoutDAG(t *testing.T) {
	t.Parallel()
	// a -> b, a -> c, b -> d, c -> d, e alone.
	tasks := []store.Task{
		{ID: 1, Idx: 0, Name: "a", Status: "completed"},
		{ID: 2, Idx: 1, Name: "b", Deps: []int{0}, Status: "running"},
		{ID: 3, Idx: 2, Name: "c", Deps: []int{0}, Status: "ready"},
		{ID: 4, Idx: 3, Name: "d", Deps: []int{1, 2}, Status: "not_started"},
		{ID: 5, Idx: 4, Name: "a-task-with-a-really-long-name", Status: "ready"},
	}
	d := layoutDAG(tasks)
	require.Len(t, d.Nodes, 5)
	require.Len(t, d.Edges, 4)
	x := map[string]int{}
	for _, n := range d.Nodes {
		x[n.Name] = n.X
		require.LessOrEqual(t, n.X+n.W, d.Width)
		require.LessOrEqual(t, n.Y+n.H, d.Height)
		require.Equal(t, "/tasks/"+map[int64]string{1: "1", 2: "2", 3: "3", 4: "4", 5: "5"}[n.TaskID], n.Href)
	}
	require.Equal(t, x["a"], x["a-task-with-a-really-…"], "roots share the first column")
	require.Less(t, x["a"], x["b"])
	require.Equal(t, x["b"], x["c"])
	require.Less(t, x["c"], x["d"])
	for _, e := range d.Edges {
		require.True(t, strings.HasPrefix(e.Path, "M "), e.Path)
	}
	require.Equal(t, 1, len(layoutDAG(tasks[:1]).Nodes))
	empty := layoutDAG(nil)
	require.Positive(t, empty.Width)
}

func TestThroughputChart(t *testing.T) {
	t.Parallel()
	m := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	c := throughputChart([]store.ThroughputBucket{
		{Minute: m, Completed: 10, Failed: 0},
		{Minute: m.Add(time.Minute), Completed: 5, Failed: 5},
		{Minute: m.Add(2 * time.Minute)},
	})
	require.EqualValues(t, 10, c.Max)
	require.EqualValues(t, 15, c.Completed)
	require.EqualValues(t, 5, c.Failed)
	require.Len(t, c.Bars, 3)
	require.Equal(t, chartH-14, c.Bars[0].DoneH, "the busiest minute is full height")
	require.Equal(t, c.Bars[1].DoneH, c.Bars[1].FailH)
	require.Equal(t, chartH, c.Bars[1].DoneY+c.Bars[1].DoneH)
	require.Equal(t, c.Bars[1].DoneY, c.Bars[1].FailY+c.Bars[1].FailH, "failed stacks on completed")
	require.Zero(t, c.Bars[2].DoneH+c.Bars[2].FailH)
	require.Equal(t, "12:00", c.From)
	require.Empty(t, throughputChart(nil).Bars)
}

func TestCachedSharesReads(t *testing.T) {
	t.Parallel()
	var c cached[int]
	now := time.Unix(1000, 0)
	reads := 0
	read := func(context.Context) (int, error) { reads++; return reads, nil }
	v, _ := c.get(context.Background(), now, time.Second, read)
	require.Equal(t, 1, v)
	v, _ = c.get(context.Background(), now.Add(500*time.Millisecond), time.Second, read)
	require.Equal(t, 1, v, "fresh value reused")
	v, _ = c.get(context.Background(), now.Add(2*time.Second), time.Second, read)
	require.Equal(t, 2, v, "stale value read again")
}

func TestIsLoopbackAndLocalPath(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "127.9.9.9:1": true, "[::1]:80": true, "localhost:80": true, "LOCALHOST:1": true,
		"localhost": true, ":80": false, "0.0.0.0:80": false, "[::]:1": false, "192.168.1.2:80": false, "host:80": false,
	} {
		require.Equal(t, want, IsLoopback(addr), addr)
	}
	for _, p := range []string{"/", "/runs?x=1", "/runs?q=customer%3Aacme+n%3A4&status=failed", "/tasks/7", "/queues/a%2Fb/x", "/runs/%C3%A9"} {
		require.Equal(t, p, localPath(p, "/"), "a clean local path is kept: %q", p)
	}
	for _, p := range []string{
		"", "runs", "evil.example", "//evil", "///evil", "//evil.example/x", "/\\evil", "\\/evil", "/\\/evil", "/a\\b",
		"/\t/evil", "/\t/evil.example", "\t/evil", " /evil", "/ /evil", "/evil ", "/\n/evil", "/\r/evil", "/a\nb",
		"/\r\nSet-Cookie:x", "/\x00evil", "/\x7f", "/\u0085/evil", "/\u00a0/evil", "/\u2028/evil",
		"/%2F%2Fevil", "/%2Fevil", "/%5Cevil", "/%09/evil", "/%0d%0aSet-Cookie:x", "/%0a", "/%20/evil", "/%zz",
		"https://evil", "http:/evil", "javascript:alert(1)", "mailto:x@evil", "/\xff\xfe", "/ok\xc3",
	} {
		require.Equal(t, "/", localPath(p, "/"), "refused: %q", p)
	}
}

func TestClientBacklogCoalesces(t *testing.T) {
	t.Parallel()
	c := &client{wake: make(chan struct{}, 1)}
	c.push([]engine.Event{{TaskID: 1}}, false)
	c.push([]engine.Event{{TaskID: 2}, {TaskID: 3}}, false)
	m, ok := c.take()
	require.True(t, ok)
	require.Equal(t, "events", m.T)
	require.Len(t, m.Events, 3, "queued batches go out as one message")
	_, ok = c.take()
	require.False(t, ok)

	c.push(make([]engine.Event, clientBacklog+1), false)
	c.push([]engine.Event{{TaskID: 4}}, false)
	m, ok = c.take()
	require.True(t, ok)
	require.Equal(t, "resync", m.T, "an overflowing backlog becomes one resync")
	_, ok = c.take()
	require.False(t, ok)
}

// fakeEngine feeds the hub from a channel.
type fakeEngine struct {
	Engine
	events chan engine.Event
}

func (f *fakeEngine) Subscribe(int) (<-chan engine.Event, func()) { return f.events, func() {} }

func (f *fakeEngine) SubscribeLogs(int) (<-chan engine.LogNote, func()) { return nil, func() {} }

func TestHubNeverBlocksOnASlowClient(t *testing.T) {
	t.Parallel()
	fe := &fakeEngine{events: make(chan engine.Event)}
	h := newHub(fe, slog.New(slog.DiscardHandler))
	stuck := &client{wake: make(chan struct{}, 1)} // never drained
	ready := h.add(stuck)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.run(ctx) }()
	<-ready

	for i := range 3 * clientBacklog {
		select {
		case fe.events <- engine.Event{TaskID: int64(i)}:
		case <-time.After(5 * time.Second):
			t.Fatalf("hub blocked after %d events", i)
		}
	}
	// The stuck client's backlog is bounded: it is told to resync.
	require.Eventually(t, func() bool {
		stuck.mu.Lock()
		defer stuck.mu.Unlock()
		return stuck.overflow && len(stuck.backlog) <= clientBacklog
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	select {
	case <-h.done:
	default:
		t.Fatal("done not closed after run")
	}
}

// subscriptionEngine counts the hub's subscriptions and their ends.
type subscriptionEngine struct {
	Engine
	subscribed, ended atomic.Int32
}

func (f *subscriptionEngine) Subscribe(int) (<-chan engine.Event, func()) {
	f.subscribed.Add(1)
	var once sync.Once
	return make(chan engine.Event), func() { once.Do(func() { f.ended.Add(1) }) }
}

func (f *subscriptionEngine) SubscribeLogs(int) (<-chan engine.LogNote, func()) {
	return nil, func() {}
}

// The hub subscribes only while a client is connected (statements do not
// announce events while nobody subscribes), and again for the next one.
func TestHubSubscribesOnlyWhileClientsAreConnected(t *testing.T) {
	t.Parallel()
	fe := &subscriptionEngine{}
	h := newHub(fe, slog.New(slog.DiscardHandler))
	h.linger = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.run(ctx) }()
	wait := func(what string, ok func() bool) {
		t.Helper()
		require.Eventually(t, ok, 5*time.Second, time.Millisecond, what)
	}
	ready := func(ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("the hub did not subscribe for its client")
		}
	}

	first := &client{wake: make(chan struct{}, 1)}
	ready(h.add(first))
	require.EqualValues(t, 1, fe.subscribed.Load())
	second := &client{wake: make(chan struct{}, 1)}
	ready(h.add(second))
	require.EqualValues(t, 1, fe.subscribed.Load(), "one subscription for every client")
	h.remove(first)
	h.remove(second)
	wait("unsubscribed after the last client left", func() bool { return fe.ended.Load() == 1 })

	third := &client{wake: make(chan struct{}, 1)}
	ready(h.add(third))
	require.EqualValues(t, 2, fe.subscribed.Load(), "subscribed again for the next client")
	require.EqualValues(t, 1, fe.ended.Load())
	cancel()
	require.NoError(t, <-done)
	require.EqualValues(t, 2, fe.ended.Load(), "run's end unsubscribes")
}

func TestStatusOf(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]int{
		engine.ErrNotFound:                       404,
		store.ErrNotFound:                        404,
		engine.ErrInvalidState:                   409,
		engine.ErrUnknownWorkflow:                422,
		engine.ErrInvalidInput:                   400,
		engine.ErrInputTooLarge:                  413,
		badRequest("x"):                          400,
		context.Canceled:                         499,
		json.Unmarshal([]byte("{"), &struct{}{}): 500,
	} {
		got, _ := statusOf(err)
		require.Equal(t, want, got, "%v", err)
	}
}

func TestSessionTokens(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	a := newAuth([]byte("0123456789abcdef"), "admin", "ro", time.Hour, clock)
	tok := a.issue(roleReadonly)
	role, ok := a.verify(tok)
	require.True(t, ok)
	require.Equal(t, roleReadonly, role)
	require.NotEqual(t, a.csrf(tok), a.csrf(a.issue(roleReadonly)), "CSRF tokens are per session")

	_, ok = a.verify(strings.Replace(tok, roleReadonly, roleAdmin, 1))
	require.False(t, ok, "a tampered role fails the MAC")
	_, ok = a.verify("garbage")
	require.False(t, ok)
	other := newAuth([]byte("0123456789abcdef"), "new-admin", "ro", time.Hour, clock)
	_, ok = other.verify(tok)
	require.False(t, ok, "changing a password ends sessions")
	now = now.Add(time.Hour)
	_, ok = a.verify(tok)
	require.False(t, ok, "expired")

	r, ok := a.checkPassword("admin")
	require.True(t, ok)
	require.Equal(t, roleAdmin, r)
	r, ok = a.checkPassword("ro")
	require.True(t, ok)
	require.Equal(t, roleReadonly, r)
	_, ok = a.checkPassword("")
	require.False(t, ok)
}

func TestLoginLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := &loginLimiter{clock: func() time.Time { return now }}
	for range loginFailLimit {
		require.False(t, l.blocked("1.2.3.4"))
		l.fail("1.2.3.4")
	}
	require.True(t, l.blocked("1.2.3.4"))
	require.False(t, l.blocked("5.6.7.8"), "per address")
	now = now.Add(loginFailWindow)
	require.False(t, l.blocked("1.2.3.4"), "the window ends")
}
