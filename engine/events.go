package engine

import (
	"github.com/cairnhq/cairn/engine/internal/notify"
	"github.com/cairnhq/cairn/engine/internal/producer"
)

// Event is one committed task transition, as announced by the database:
// the task and its run, the move (From is "" when the task was created),
// its queue, attempt and worker.
type Event = notify.Event

// Subscribe returns a channel of committed transitions from every engine
// on the database (it needs Config.DatabaseURL) and a function that ends
// the subscription. A consumer that falls more than buffer events behind
// misses events rather than slowing the engine; see DroppedEvents.
// Statements announce transitions only while some engine has a
// subscriber: on a started engine, Subscribe returns once this engine is
// registered as a listener, and every transition committed after that
// reaches the channel.
func (e *Engine) Subscribe(buffer int) (<-chan Event, func()) { return e.hub.Subscribe(buffer) }

// DroppedEvents returns how many events slow subscribers missed.
func (e *Engine) DroppedEvents() int64 { return e.hub.DroppedEvents() }

// newHub returns the engine's hub (see notify.Hub): what the database
// announces goes to the subscribers and WaitRun calls, and through these
// callbacks to the engine's queues and handlers.
func (e *Engine) newHub() *notify.Hub {
	return notify.NewHub(notify.Config{Store: e.st, Logger: e.cfg.Logger, Health: e.health,
		Poke: func(name string) {
			if q, ok := e.queues[name]; ok {
				q.Poke()
			}
		},
		Capped: func(name string) bool {
			q, ok := e.queues[name]
			if ok {
				q.Capped.Store(true) // re-read at the next claim
			}
			return ok
		},
		RefreshCap: func(name string) {
			if q, ok := e.queues[name]; ok && e.life.Loops() != nil {
				producer.RefreshCap(e.life.Loops(), e.st, e.health, q)
			}
		},
		Taken: e.loseTask, Signal: e.signalLocal, Reconnected: e.onReconnect})
}
