package web

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cairnhq/cairn/engine"
)

// Websocket tuning.
const (
	// hubBuffer is the engine subscription's buffer.
	hubBuffer = 4096
	// flushEvery batches events into one message per client.
	flushEvery = 100 * time.Millisecond
	// maxBatch caps the events of one flush; beyond it clients resync.
	maxBatch = 500
	// clientBacklog caps the events waiting for one client; a client
	// further behind gets one "resync" message instead of the events.
	clientBacklog = 1000
	writeWait     = 10 * time.Second
	pongWait      = 60 * time.Second
	pingEvery     = pongWait * 9 / 10
)

// wsMessage is what the server sends on a websocket:
//
//	{"t":"hello"}                  the client is registered; events follow
//	{"t":"events","events":[...]}  committed task transitions, in order
//	{"t":"resync"}                 events were dropped: re-read the page
//	{"t":"logs","logs":[task ids]} these tasks have new live log lines
//
// An events message may carry "logs" too.
type wsMessage struct {
	T      string         `json:"t"`
	Events []engine.Event `json:"events,omitempty"`
	Logs   []int64        `json:"logs,omitempty"`
}

// hub subscribes to the engine's events while websocket clients are
// connected, and fans them out without ever blocking on one: each client
// has a bounded backlog drained by its own writer goroutine; a client
// whose backlog overflows loses it and gets a resync; a client that
// cannot take a write within writeWait is dropped.
//
// With no client for hubLinger, the hub unsubscribes: while no engine
// on the database has a subscriber, statements do not announce
// transitions (NOTIFY serializes the commits of the whole cluster; see
// store.EventListenerKeep). The next client waits for the subscription
// before its hello, and re-reads its page on hello as after any connect.
type hub struct {
	eng    Engine
	log    *slog.Logger
	linger time.Duration // how long the hub stays subscribed without a client

	mu      sync.Mutex
	clients map[*client]struct{}
	running bool
	ready   chan struct{} // closed while subscribed; a new one after unsubscribing
	wanted  chan struct{} // capacity 1: a client arrived
	done    chan struct{} // closed when run ends
}

// hubLinger is how long the hub stays subscribed after its last client
// left: a browser going from page to page reconnects within it.
const hubLinger = time.Minute

func newHub(eng Engine, log *slog.Logger) *hub {
	return &hub{eng: eng, log: log, linger: hubLinger, clients: map[*client]struct{}{},
		ready: make(chan struct{}), wanted: make(chan struct{}, 1), done: make(chan struct{})}
}

// client is one websocket connection.
type client struct {
	wake chan struct{} // capacity 1: there is something to send

	mu       sync.Mutex
	backlog  []engine.Event
	logs     map[int64]struct{} // tasks with new log lines
	overflow bool
}

// pushLogs queues task ids with new log lines; too many make a resync.
func (c *client) pushLogs(ids []int64) {
	c.mu.Lock()
	if !c.overflow {
		if c.logs == nil {
			c.logs = map[int64]struct{}{}
		}
		for _, id := range ids {
			c.logs[id] = struct{}{}
		}
		if len(c.logs) > clientBacklog {
			c.backlog, c.logs, c.overflow = nil, nil, true
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *client) push(evs []engine.Event, resync bool) {
	c.mu.Lock()
	if resync || len(c.backlog)+len(evs) > clientBacklog {
		c.backlog, c.overflow = nil, true
	} else if !c.overflow {
		c.backlog = append(c.backlog, evs...)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns what to send next, coalescing everything queued so far.
func (c *client) take() (wsMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var logs []int64
	for id := range c.logs {
		logs = append(logs, id)
	}
	switch {
	case c.overflow:
		c.overflow, c.backlog, c.logs = false, nil, nil
		return wsMessage{T: "resync"}, true
	case len(c.backlog) > 0:
		evs := c.backlog
		c.backlog, c.logs = nil, nil
		return wsMessage{T: "events", Events: evs, Logs: logs}, true
	case len(logs) > 0:
		c.logs = nil
		return wsMessage{T: "logs", Logs: logs}, true
	}
	return wsMessage{}, false
}

// add registers a client and returns the channel closed once the hub is
// subscribed (already closed when it is).
func (h *hub) add(c *client) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients[c] = struct{}{}
	select {
	case h.wanted <- struct{}{}:
	default:
	}
	return h.ready
}

func (h *hub) remove(c *client) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

func (h *hub) broadcastLogs(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		c.pushLogs(ids)
	}
}

func (h *hub) broadcast(evs []engine.Event, resync bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		c.push(evs, resync)
	}
}

// run subscribes while clients are connected and fans out, until ctx
// ends or the engine closes the subscription.
func (h *hub) run(ctx context.Context) error {
	h.mu.Lock()
	if h.running {
		h.mu.Unlock()
		return nil
	}
	h.running = true
	h.mu.Unlock()
	defer close(h.done)
	for {
		for h.count() == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-h.wanted:
			}
		}
		if !h.serve(ctx) {
			return nil
		}
	}
}

// serve subscribes and fans out until ctx ends or the engine closes the
// subscription (false), or no client was connected for h.linger (true).
func (h *hub) serve(ctx context.Context) bool {
	events, unsubscribe := h.eng.Subscribe(hubBuffer)
	defer unsubscribe()
	logNotes, unsubscribeLogs := h.eng.SubscribeLogs(hubBuffer)
	defer unsubscribeLogs()
	h.mu.Lock()
	close(h.ready)
	h.mu.Unlock()
	h.log.InfoContext(ctx, "live updates started")

	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	var batch []engine.Event
	logged := map[int64]struct{}{} // tasks with new log lines since the last flush
	overflow := false
	var idleSince time.Time // when the last client left; zero while one is connected
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				h.log.InfoContext(ctx, "live updates ended: the engine closed its events")
				h.broadcast(nil, true)
				return false
			}
			if len(batch) >= maxBatch {
				batch, overflow = batch[:0], true
				continue
			}
			if !overflow {
				batch = append(batch, ev)
			}
		case n, ok := <-logNotes:
			if !ok {
				logNotes = nil // the engine is closing; its events channel says so
				continue
			}
			logged[n.TaskID] = struct{}{}
		case now := <-tick.C:
			if len(logged) > 0 && !overflow {
				ids := make([]int64, 0, len(logged))
				for id := range logged {
					ids = append(ids, id)
				}
				h.broadcastLogs(ids)
			}
			clear(logged)
			if overflow {
				h.broadcast(nil, true)
			} else if len(batch) > 0 {
				h.broadcast(batch, false)
			}
			batch, overflow = nil, false
			switch {
			case h.count() > 0:
				idleSince = time.Time{}
			case idleSince.IsZero():
				idleSince = now
			case now.Sub(idleSince) >= h.linger && h.unready():
				h.log.InfoContext(ctx, "live updates paused: no client", slog.Duration("idle", now.Sub(idleSince)))
				return true
			}
		}
	}
}

// unready makes the hub's ready channel a new open one if no client is
// connected, and reports whether it did: clients that arrive after it wait
// for the next subscription.
func (h *hub) unready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) > 0 {
		return false
	}
	h.ready = make(chan struct{})
	return true
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  512,
	WriteBufferSize: 8192,
	// Origin is checked by the handler before upgrading.
	CheckOrigin: func(*http.Request) bool { return true },
}

// websocket upgrades an authenticated, same-origin request and streams
// events to it until either side goes away or Run ends.
func (s *Server) websocket(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Origin") != "" && !s.sameOrigin(r) {
		s.forbidden(w, r, "websocket origin does not match the site")
		return
	}
	if sessionFrom(r.Context()) == nil {
		http.Error(w, "login required", http.StatusUnauthorized)
		return
	}
	c := &client{wake: make(chan struct{}, 1)}
	ready := s.hub.add(c) // before the handshake ends, so no event after it is missed
	defer s.hub.remove(c)
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered the client
	}
	defer conn.Close()

	// Reader: answers pings and control frames, notices the close.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.SetReadLimit(512)
		_ = conn.SetReadDeadline(time.Now().Add(pongWait))
		conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(pongWait)) })
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()

	write := func(msg any) bool {
		_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
		if err := conn.WriteJSON(msg); err != nil {
			s.log.DebugContext(r.Context(), "websocket write failed: dropping client", slog.String("error", err.Error()))
			return false
		}
		return true
	}
	// Hello goes out once the hub listens, so a client that waits for it
	// sees every event committed afterwards.
	select {
	case <-ready:
	case <-closed:
		return
	case <-r.Context().Done():
		return
	case <-s.hub.done:
		return
	}
	if !write(wsMessage{T: "hello"}) {
		return
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-c.wake:
			if msg, ok := c.take(); ok && !write(msg) {
				return
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				return
			}
		case <-closed:
			return
		case <-s.hub.done:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down"), time.Now().Add(time.Second))
			return
		}
	}
}
