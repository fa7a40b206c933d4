package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

// Live task logs: every line a handler logs through TaskHandle.Logger
// (within maxLogLines per attempt) is also handed to a taskLogWriter, which
// appends buffered lines to task_logs in one statement per batch and
// announces their tasks on the events channel, so that an open task page
// shows them as they come. A handler never waits for the database: lines
// that find the buffer full are dropped from the live log (the attempt's
// end event still keeps them in its detail).

// Bounds of the live log.
const (
	// maxLogText cuts a line's message, and each attribute value.
	maxLogText = 2 << 10
	// maxLogAttrs caps the attributes kept of a line.
	maxLogAttrs = 32
	// logBuffer caps the lines waiting for the writer.
	logBuffer = 10000
	// logBatch caps the lines of one write.
	logBatch = 1000
)

// LogNote says that a task has new lines in its live log.
type LogNote struct {
	TaskID int64 `json:"task_id"`
	RunID  int64 `json:"run_id"`
}

// taskLogWriter batches live log lines into task_logs. It is a service:
// Start returns at once; Stop writes what is buffered and ends.
type taskLogWriter struct {
	st     *store.Store
	log    *slog.Logger
	health *backoff.Loop // failed writes: logged when the state changes, not at every batch

	mu      sync.Mutex
	buf     []store.TaskLogLine
	dropped int64
	closed  bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newTaskLogWriter(st *store.Store, log *slog.Logger, health *backoff.Health) *taskLogWriter {
	return &taskLogWriter{st: st, log: log, health: health.Loop("task log"), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// add queues a line without blocking.
func (w *taskLogWriter) add(l store.TaskLogLine) {
	w.mu.Lock()
	if w.closed || len(w.buf) >= logBuffer {
		w.dropped++
		w.mu.Unlock()
		return
	}
	w.buf = append(w.buf, l)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start runs the writer until Stop.
func (w *taskLogWriter) Start(ctx context.Context) error {
	go w.run(context.WithoutCancel(ctx))
	return nil
}

// Stop writes the buffered lines and ends the writer; safe twice.
func (w *taskLogWriter) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *taskLogWriter) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
			w.flush(ctx)
		case <-w.stop:
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.flush(ctx)
			return
		}
	}
}

// flush writes everything buffered, a batch at a time. A failed batch is
// logged and dropped: the live log is a convenience, the attempt's detail
// keeps the lines.
func (w *taskLogWriter) flush(ctx context.Context) {
	for {
		w.mu.Lock()
		n := min(len(w.buf), logBatch)
		batch := w.buf[:n:n]
		w.buf = w.buf[n:]
		if len(w.buf) == 0 {
			w.buf = nil
		}
		dropped := w.dropped
		w.dropped = 0
		w.mu.Unlock()
		if dropped > 0 {
			w.log.WarnContext(ctx, "live task log buffer full: lines dropped from the live log", slog.Int64("lines", dropped))
		}
		if n == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := w.st.TaskLogAppend(wctx, batch)
		cancel()
		if err != nil {
			w.health.Fail(ctx, fmt.Errorf("write %d live task log lines (dropped from the live log): %w", n, err))
		} else {
			w.health.OK(ctx)
		}
	}
}

// liveLine is a captured line as the live log stores it: text cut at
// maxLogText (valid UTF-8, no NUL), attributes as text.
func liveLine(ex *execution, l logLine) store.TaskLogLine {
	out := store.TaskLogLine{TaskID: ex.Task.ID, RunID: ex.Task.RunID, Attempt: ex.Task.Attempt,
		At: l.At, Level: l.Level, Msg: cleanLogText(l.Msg)}
	if out.At.IsZero() {
		out.At = ex.e.cfg.Clock()
	}
	if len(l.Attrs) > 0 {
		out.Attrs = make(map[string]string, min(len(l.Attrs), maxLogAttrs))
		for k, v := range l.Attrs {
			if len(out.Attrs) >= maxLogAttrs {
				break
			}
			out.Attrs[cleanLogText(k)] = cleanLogText(fmt.Sprint(v))
		}
	}
	return out
}

// cleanLogText makes s storable as text: valid UTF-8 without NUL, at
// most maxLogText bytes (cut on a rune boundary, marked with "…").
func cleanLogText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= maxLogText {
		return s
	}
	cut := maxLogText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// logSubscribers fans log notes out to in-process consumers without
// blocking: a consumer whose buffer is full misses notes.
type logSubscribers struct {
	mu    sync.Mutex
	next  int
	chans map[int]chan LogNote
}

func (s *logSubscribers) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chans)
}

func (s *logSubscribers) publish(notes []store.LogNote) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.chans {
		for _, n := range notes {
			select {
			case ch <- LogNote{TaskID: n.TaskID, RunID: n.RunID}:
			default:
			}
		}
	}
}

func (s *logSubscribers) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.chans {
		close(ch)
		delete(s.chans, id)
	}
}

// SubscribeLogs returns a channel of notes naming the tasks that have new
// lines in their live log (task_logs), from every engine on the database
// (it needs Config.DatabaseURL), and a function that ends the
// subscription. A consumer more than buffer notes behind misses notes.
func (e *Engine) SubscribeLogs(buffer int) (<-chan LogNote, func()) {
	ch := make(chan LogNote, max(buffer, 1))
	e.logSubs.mu.Lock()
	if e.logSubs.chans == nil {
		e.logSubs.chans = map[int]chan LogNote{}
	}
	id := e.logSubs.next
	e.logSubs.next++
	e.logSubs.chans[id] = ch
	e.logSubs.mu.Unlock()
	e.listenForEvents("subscribe logs")
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			e.logSubs.mu.Lock()
			defer e.logSubs.mu.Unlock()
			if c, ok := e.logSubs.chans[id]; ok {
				close(c)
				delete(e.logSubs.chans, id)
			}
		})
	}
}
