// Package notify is the engine's side of PostgreSQL's NOTIFY. The Hub
// hears what the database announces (the listener) and hands each
// notification to what waits for it: the in-process subscribers of
// events and of live log notes, the WaitRun calls, and, through the
// engine's callbacks, the claim loops and handlers. The Waker sends the
// announcements of the ready queues of enqueues. The wire format is
// store/notify.go's.
package notify

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
)

// Event is one committed task transition, as announced by the database.
type Event struct {
	TaskID   int64  `json:"task_id"`
	RunID    int64  `json:"run_id"`
	From     string `json:"from"` // "" when the task was created
	To       string `json:"to"`
	Queue    string `json:"queue"`
	Attempt  int    `json:"attempt"`
	WorkerID int64  `json:"worker_id,omitempty"`
}

// LogNote says that a task has new lines in its live log.
type LogNote struct {
	TaskID int64 `json:"task_id"`
	RunID  int64 `json:"run_id"`
}

// Store is what the hub needs of the store: the channels it listens on,
// and the statements of the event listener registration.
type Store interface {
	ReadyChannel() string
	ControlChannel() string
	EventsChannel() string
	maint.ListeningStore
}

// Config is what a Hub hears with and whom it tells. The callbacks are
// the engine's: the hub knows no queue or task of its own. A nil
// callback does nothing.
type Config struct {
	Store  Store
	Logger *slog.Logger
	Health *backoff.Health
	// Poke wakes the claim loops of queue (work was announced ready, or
	// its cap was read again); an unknown queue is ignored.
	Poke func(queue string)
	// Capped marks queue capped until its cap is read again (the cap
	// changed), and reports whether this engine runs the queue.
	Capped func(queue string) bool
	// RefreshCap reads the cap of a queue Capped knew again. The hub runs
	// it on a goroutine of its own, then pokes the queue.
	RefreshCap func(queue string)
	// Taken cancels the local handler of a task's attempt taken from this
	// worker; attempt is 0 when the message names none (it comes from a
	// version before migration 036): whichever attempt runs here stops.
	Taken func(taskID int64, attempt int)
	// Signal wakes the local handler of a task that was signalled.
	Signal func(taskID int64)
	// Reconnected runs when the listener is back after a drop, before
	// the hub wakes every run waiter.
	Reconnected func()
}

// Hub dispatches the notifications of the engine's listener. Its
// service is the listening registration (see maint.Listening): Start
// returns at once, Stop is safe twice or before Start; tests call
// Dispatch and RunOnce directly.
type Hub struct {
	cfg     Config
	events  subscribers[Event]
	logs    subscribers[LogNote]
	waiters runWaiters

	refreshes sync.WaitGroup // the goroutines reading a queue's cap

	mu        sync.Mutex
	listener  *store.Listener
	listening *maint.Listening // the row that makes statements announce events (nil without a listener)
}

// NewHub returns a hub that listens on nothing yet.
func NewHub(cfg Config) *Hub {
	cfg.Poke = orNop(cfg.Poke)
	cfg.RefreshCap = orNop(cfg.RefreshCap)
	if cfg.Taken == nil {
		cfg.Taken = func(int64, int) {}
	}
	cfg.Signal = orNop(cfg.Signal)
	if cfg.Capped == nil {
		cfg.Capped = func(string) bool { return false }
	}
	if cfg.Reconnected == nil {
		cfg.Reconnected = func() {}
	}
	return &Hub{cfg: cfg}
}

func orNop[T any](f func(T)) func(T) {
	if f == nil {
		return func(T) {}
	}
	return f
}

// Listen opens the listener on dsn (the ready and control channels, and
// the events channel when something subscribes already) and the
// registration of holder (unique to this engine) in event_listeners,
// written once now so that subscribers from before Listen see every
// transition from the first claim on. A failed write is logged and
// retried by the hub's loop.
func (h *Hub) Listen(ctx context.Context, dsn, holder string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	channels := []string{h.cfg.Store.ReadyChannel(), h.cfg.Store.ControlChannel()}
	if h.wantsEvents() {
		channels = append(channels, h.cfg.Store.EventsChannel())
	}
	l, err := store.Listen(ctx, store.ListenParams{
		DSN: dsn, Channels: channels, Logger: h.cfg.Logger,
		OnNotify: h.Dispatch, OnReconnect: h.reconnected,
	})
	if err != nil {
		return err
	}
	h.listener = l
	h.listening = maint.NewListening(h.cfg.Store, holder, h.wantsEvents, h.cfg.Logger, h.cfg.Health)
	// Subscribers from before Start: the row before the first claim.
	if err := h.listening.RunOnce(ctx); err != nil {
		h.cfg.Logger.WarnContext(ctx, "register as an event listener (retried)", slog.Any("error", err))
	}
	return nil
}

// Listening reports whether the hub listens (Listen succeeded).
func (h *Hub) Listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listener != nil
}

func (h *Hub) registration() *maint.Listening {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listening
}

// Start runs the registration's loop, which keeps the event_listeners row
// while something subscribes, when the hub listens; it returns at once.
func (h *Hub) Start(ctx context.Context) error {
	if l := h.registration(); l != nil {
		return l.Start(ctx)
	}
	return nil
}

// Stop ends the registration's loop; safe twice or before Start.
func (h *Hub) Stop() {
	if l := h.registration(); l != nil {
		l.Stop()
	}
}

// RunOnce writes, renews or drops the event_listeners row now (see
// maint.Listening.RunOnce); without a listener it does nothing.
func (h *Hub) RunOnce(ctx context.Context) error {
	if l := h.registration(); l != nil {
		return l.RunOnce(ctx)
	}
	return nil
}

// Release drops the event_listeners row, if kept (at shutdown).
func (h *Hub) Release(ctx context.Context) error {
	if l := h.registration(); l != nil {
		return l.Release(ctx)
	}
	return nil
}

// Close closes the listener, waits for the reads of caps it started and
// closes every subscriber's channel.
func (h *Hub) Close() {
	h.mu.Lock()
	l := h.listener
	h.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	h.refreshes.Wait()
	h.events.closeAll()
	h.logs.closeAll()
}

// Subscribe returns a channel of the committed transitions and a function
// that ends the subscription (see Engine.Subscribe). With a listener, it
// returns once the hub listens on the events channel and its row in
// event_listeners is written.
func (h *Hub) Subscribe(buffer int) (<-chan Event, func()) {
	ch, cancel := h.events.add(buffer)
	h.listenForEvents("subscribe")
	return ch, cancel
}

// SubscribeLogs returns a channel of notes naming the tasks that have new
// lines in their live log, and a function that ends the subscription
// (see Engine.SubscribeLogs).
func (h *Hub) SubscribeLogs(buffer int) (<-chan LogNote, func()) {
	ch, cancel := h.logs.add(buffer)
	h.listenForEvents("subscribe logs")
	return ch, cancel
}

// DroppedEvents returns how many events slow subscribers missed.
func (h *Hub) DroppedEvents() int64 { return h.events.dropped.Load() }

// AwaitRun registers a wait for the end of run id: woken receives when
// the database announces it (and after the listener reconnects); done
// removes the wait.
func (h *Hub) AwaitRun(id int64) (woken <-chan struct{}, done func()) { return h.waiters.add(id) }

// listenForEvents makes a listening hub listen on the events channel and
// keep its row in event_listeners (see maint.Listening), so that every
// transition committed after it returns is announced to it. A failed
// write is logged and retried by the registration's loop.
func (h *Hub) listenForEvents(what string) {
	h.mu.Lock()
	reg := h.listening // set by Listen with the listener, or neither
	if h.listener != nil {
		if err := h.listener.Add(h.cfg.Store.EventsChannel()); err != nil {
			h.cfg.Logger.Warn(what+": listen for events", slog.Any("error", err))
		}
	}
	h.mu.Unlock()
	if reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenRegisterTimeout)
	defer cancel()
	if err := reg.RunOnce(ctx); err != nil {
		h.cfg.Logger.Warn(what+": register as an event listener (retried)", slog.Any("error", err))
	}
}

// listenRegisterTimeout bounds Subscribe's write of the engine's
// event_listeners row; the listening service retries a failed one.
const listenRegisterTimeout = 5 * time.Second

// wantsEvents reports whether anything in this process consumes events
// or log notes.
func (h *Hub) wantsEvents() bool { return h.events.count() > 0 || h.logs.count() > 0 }

// reconnected runs when the listener is back after a drop: the engine's
// part first, then every run wait reads its run again (a run may have
// ended while the listener was away).
func (h *Hub) reconnected() {
	h.cfg.Reconnected()
	h.waiters.wake()
}

// Dispatch hands one notification of the listener to whom it concerns.
// A payload that is not a message of its channel is logged and dropped;
// a control kind this version does not know is ignored.
func (h *Hub) Dispatch(n store.Notification) {
	switch n.Channel {
	case h.cfg.Store.ReadyChannel():
		msg, err := store.DecodeReady(n.Payload)
		if err != nil {
			h.badNotification(n, err)
			return
		}
		h.cfg.Poke(msg.Queue)
	case h.cfg.Store.ControlChannel():
		msg, err := store.DecodeControl(n.Payload)
		if err != nil {
			h.badNotification(n, err)
			return
		}
		switch msg.Kind {
		case store.ControlTaken:
			for i, id := range msg.TaskIDs {
				attempt := 0
				if msg.Attempts != nil {
					attempt = msg.Attempts[i]
				}
				h.cfg.Taken(id, attempt)
			}
		case store.ControlSignal:
			for _, id := range msg.TaskIDs {
				h.cfg.Signal(id)
			}
		case store.ControlQueue:
			if h.cfg.Capped(msg.Queue) { // re-read at the next claim
				h.refreshCap(msg.Queue)
			}
		case store.ControlRun:
			h.waiters.wake(msg.RunIDs...)
		}
	case h.cfg.Store.EventsChannel():
		msg, err := store.DecodeEvents(n.Payload)
		if err != nil {
			h.badNotification(n, err)
			return
		}
		if len(msg.Logs) > 0 {
			notes := make([]LogNote, len(msg.Logs))
			for i, l := range msg.Logs {
				notes[i] = LogNote{TaskID: l.TaskID, RunID: l.RunID}
			}
			h.logs.publish(notes)
		}
		if len(msg.Transitions) == 0 {
			return
		}
		evs := make([]Event, len(msg.Transitions))
		for i, t := range msg.Transitions {
			evs[i] = Event{TaskID: t.TaskID, RunID: t.RunID, From: t.From, To: t.To,
				Queue: t.Queue, Attempt: t.Attempt, WorkerID: t.WorkerID}
		}
		h.events.publish(evs)
	}
}

func (h *Hub) badNotification(n store.Notification, err error) {
	h.cfg.Logger.Warn("drop malformed notification", slog.String("channel", n.Channel), slog.Any("error", err))
}

// refreshCap reads queue's cap again off the listener's goroutine, then
// pokes the queue.
func (h *Hub) refreshCap(queue string) {
	h.refreshes.Add(1)
	go func() {
		defer h.refreshes.Done()
		h.cfg.RefreshCap(queue)
		h.cfg.Poke(queue)
	}()
}
