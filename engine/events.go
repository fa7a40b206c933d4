package engine

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"

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
func (e *Engine) Subscribe(buffer int) (<-chan Event, func()) {
	ch := make(chan Event, max(buffer, 1))
	e.subs.mu.Lock()
	id := e.subs.next
	e.subs.next++
	e.subs.chans[id] = ch
	e.subs.mu.Unlock()
	e.lifeMu.Lock()
	if e.listener != nil {
		if err := e.listener.Add(e.st.EventsChannel()); err != nil {
			e.log.Warn("subscribe: listen for events", slog.Any("error", err))
		}
	}
	e.lifeMu.Unlock()
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

// DroppedEvents returns how many events slow subscribers missed.
func (e *Engine) DroppedEvents() int64 { return e.subs.dropped.Load() }

// onNotify dispatches one notification from the listener.
func (e *Engine) onNotify(n store.Notification) {
	switch n.Channel {
	case e.st.ReadyChannel():
		if q, ok := e.queues[n.Payload]; ok {
			q.poke()
		}
	case e.st.ControlChannel():
		var msg struct {
			K string  `json:"k"`
			T []int64 `json:"t"`
			Q string  `json:"q"`
		}
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
			return
		}
		switch msg.K {
		case "taken":
			for _, id := range msg.T {
				e.loseTask(id)
			}
		case "signal":
			for _, id := range msg.T {
				e.signalLocal(id)
			}
		case "queue":
			if q, ok := e.queues[msg.Q]; ok {
				q.capped.Store(true) // re-read at the next claim
				e.refreshCapAsync(q)
			}
		}
	case e.st.EventsChannel():
		var msg struct {
			E [][]json.RawMessage `json:"e"`
		}
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
			return
		}
		evs := make([]Event, 0, len(msg.E))
		for _, r := range msg.E {
			if len(r) < 7 {
				continue
			}
			var ev Event
			var from *string
			var worker *int64
			_ = json.Unmarshal(r[0], &ev.TaskID)
			_ = json.Unmarshal(r[1], &ev.RunID)
			_ = json.Unmarshal(r[2], &from)
			_ = json.Unmarshal(r[3], &ev.To)
			_ = json.Unmarshal(r[4], &ev.Queue)
			_ = json.Unmarshal(r[5], &ev.Attempt)
			_ = json.Unmarshal(r[6], &worker)
			if from != nil {
				ev.From = *from
			}
			if worker != nil {
				ev.WorkerID = *worker
			}
			evs = append(evs, ev)
		}
		e.subs.publish(evs)
	}
}

func (e *Engine) refreshCapAsync(q *queueRunner) {
	go func() {
		if e.loopsCtx != nil {
			e.refreshCap(e.loopsCtx, q)
		}
		q.poke()
	}()
}
