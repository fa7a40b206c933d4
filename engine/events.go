package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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

// subscribers fans events out to in-process consumers without ever
// blocking: a consumer whose buffer is full misses events (counted).
type subscribers struct {
	mu      sync.Mutex
	next    int
	chans   map[int]chan Event
	dropped atomic.Int64
}

func (s *subscribers) init() { s.chans = map[int]chan Event{} }

func (s *subscribers) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chans)
}

func (s *subscribers) publish(evs []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.chans {
		for _, ev := range evs {
			select {
			case ch <- ev:
			default:
				s.dropped.Add(1)
			}
		}
	}
}

func (s *subscribers) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.chans {
		close(ch)
		delete(s.chans, id)
	}
}

// Subscribe returns a channel of committed transitions from every engine
// on the database (it needs Config.DatabaseURL) and a function that ends
// the subscription. A consumer that falls more than buffer events behind
// misses events rather than slowing the engine; see DroppedEvents.
// Statements announce transitions only while some engine has a
// subscriber: on a started engine, Subscribe returns once this engine is
// registered as a listener, and every transition committed after that
// reaches the channel.
func (e *Engine) Subscribe(buffer int) (<-chan Event, func()) {
	ch := make(chan Event, max(buffer, 1))
	e.subs.mu.Lock()
	id := e.subs.next
	e.subs.next++
	e.subs.chans[id] = ch
	e.subs.mu.Unlock()
	e.listenForEvents("subscribe")
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			e.subs.mu.Lock()
			defer e.subs.mu.Unlock()
			if c, ok := e.subs.chans[id]; ok {
				close(c)
				delete(e.subs.chans, id)
			}
		})
	}
}

// listenForEvents makes a started engine listen on the events channel and
// keep its row in event_listeners (see maint.Listening), so that every
// transition committed after it returns is announced to it. A failed
// write is logged and retried by the listening service.
func (e *Engine) listenForEvents(what string) {
	e.lifeMu.Lock()
	reg := e.listening // set by Start with the listener, or neither
	if e.listener != nil {
		if err := e.listener.Add(e.st.EventsChannel()); err != nil {
			e.log.Warn(what+": listen for events", slog.Any("error", err))
		}
	}
	e.lifeMu.Unlock()
	if reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenRegisterTimeout)
	defer cancel()
	if err := reg.RunOnce(ctx); err != nil {
		e.log.Warn(what+": register as an event listener (retried)", slog.Any("error", err))
	}
}

// listenRegisterTimeout bounds Subscribe's write of the engine's
// event_listeners row; the listening service retries a failed one.
const listenRegisterTimeout = 5 * time.Second

// wantsEvents reports whether anything in this process consumes events
// or log notes.
func (e *Engine) wantsEvents() bool { return e.subs.count() > 0 || e.logSubs.count() > 0 }

// DroppedEvents returns how many events slow subscribers missed.
func (e *Engine) DroppedEvents() int64 { return e.subs.dropped.Load() }

// onNotify dispatches one notification from the listener. A payload that
// is not a message of its channel is logged and dropped; a control kind
// this version does not know is ignored.
func (e *Engine) onNotify(n store.Notification) {
	switch n.Channel {
	case e.st.ReadyChannel():
		msg, err := store.DecodeReady(n.Payload)
		if err != nil {
			e.badNotification(n, err)
			return
		}
		if q, ok := e.queues[msg.Queue]; ok {
			q.Poke()
		}
	case e.st.ControlChannel():
		msg, err := store.DecodeControl(n.Payload)
		if err != nil {
			e.badNotification(n, err)
			return
		}
		switch msg.Kind {
		case store.ControlTaken:
			for _, id := range msg.TaskIDs {
				e.loseTask(id)
			}
		case store.ControlSignal:
			for _, id := range msg.TaskIDs {
				e.signalLocal(id)
			}
		case store.ControlQueue:
			if q, ok := e.queues[msg.Queue]; ok {
				q.Capped.Store(true) // re-read at the next claim
				e.refreshCapAsync(q)
			}
		case store.ControlRun:
			e.runWaiters.wake(msg.RunIDs...)
		}
	case e.st.EventsChannel():
		msg, err := store.DecodeEvents(n.Payload)
		if err != nil {
			e.badNotification(n, err)
			return
		}
		if len(msg.Logs) > 0 {
			e.logSubs.publish(msg.Logs)
		}
		if len(msg.Transitions) == 0 {
			return
		}
		evs := make([]Event, len(msg.Transitions))
		for i, t := range msg.Transitions {
			evs[i] = Event{TaskID: t.TaskID, RunID: t.RunID, From: t.From, To: t.To,
				Queue: t.Queue, Attempt: t.Attempt, WorkerID: t.WorkerID}
		}
		e.subs.publish(evs)
	}
}

func (e *Engine) badNotification(n store.Notification, err error) {
	e.log.Warn("drop malformed notification", slog.String("channel", n.Channel), slog.Any("error", err))
}

func (e *Engine) refreshCapAsync(q *queueRunner) {
	go func() {
		if e.loopsCtx != nil {
			e.refreshCap(e.loopsCtx, q)
		}
		q.Poke()
	}()
}
