// Package tasklog is the writer of the live task logs: every line a
// handler logs through TaskHandle.Logger (within the engine's cap of
// lines per attempt) is also handed to the Writer, which appends buffered
// lines to task_logs in one statement per batch and announces their tasks
// on the events channel, so that an open task page shows them as they
// come. A handler never waits for the database: lines that find the
// buffer full are dropped from the live log (the attempt's end event
// still keeps them in its detail).
package tasklog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

// Bounds of the live log.
const (
	// MaxText cuts a line's message, and each attribute value.
	MaxText = 2 << 10
	// MaxAttrs caps the attributes kept of a line.
	MaxAttrs = 32
	// Buffer caps the lines waiting for the writer.
	Buffer = 10000
	// Batch caps the lines of one write.
	Batch = 1000
)

// writeTimeout bounds one batch's write.
const writeTimeout = 10 * time.Second

// Store is what the writer needs of the store.
type Store interface {
	TaskLogAppend(ctx context.Context, lines []store.TaskLogLine) error
}

// Config configures a Writer. The writer reads no time: lines come
// stamped (see Line).
type Config struct {
	Store  Store
	Logger *slog.Logger
	// Health gets the failed writes (loop "task log"): logged when the
	// state changes, not at every batch.
	Health *backoff.Health
}

// Writer batches live log lines into task_logs. It is a service: Start
// returns at once; Stop writes what is buffered and ends, safe twice or
// before Start; Flush writes what is buffered now.
type Writer struct {
	st     Store
	log    *slog.Logger
	health *backoff.Loop

	mu      sync.Mutex
	buf     []store.TaskLogLine
	dropped int64
	closed  bool
	started bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a writer that is not started.
func New(cfg Config) *Writer {
	return &Writer{st: cfg.Store, log: cfg.Logger, health: cfg.Health.Loop("task log"),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Add queues a line without blocking.
func (w *Writer) Add(l store.TaskLogLine) {
	w.mu.Lock()
	if w.closed || len(w.buf) >= Buffer {
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

var errStarted = errors.New("task log writer: already started")

// Start runs the writer until Stop, and returns at once.
func (w *Writer) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errStarted
	}
	w.started = true
	go w.run(context.WithoutCancel(ctx))
	return nil
}

// Stop writes the buffered lines and ends the writer; safe twice or
// before Start.
func (w *Writer) Stop() {
	w.once.Do(func() { close(w.stop) })
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		<-w.done
	}
}

func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
			w.Flush(ctx)
		case <-w.stop:
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.Flush(ctx)
			return
		}
	}
}

// Flush writes everything buffered, a batch at a time. A failed batch is
// logged and dropped: the live log is a convenience, the attempt's detail
// keeps the lines.
func (w *Writer) Flush(ctx context.Context) {
	for {
		w.mu.Lock()
		n := min(len(w.buf), Batch)
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
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := w.st.TaskLogAppend(wctx, batch)
		cancel()
		if err != nil {
			w.health.Fail(ctx, fmt.Errorf("write %d live task log lines (dropped from the live log): %w", n, err))
		} else {
			w.health.OK(ctx)
		}
	}
}

// Line is a captured line l, with attributes attrs, as the live log
// stores it: text cut at MaxText (valid UTF-8, no NUL), at most MaxAttrs
// attributes, as text.
func Line(l store.TaskLogLine, attrs map[string]any) store.TaskLogLine {
	l.Msg = CleanText(l.Msg)
	l.Attrs = nil
	if len(attrs) > 0 {
		l.Attrs = make(map[string]string, min(len(attrs), MaxAttrs))
		for k, v := range attrs {
			if len(l.Attrs) >= MaxAttrs {
				break
			}
			l.Attrs[CleanText(k)] = CleanText(fmt.Sprint(v))
		}
	}
	return l
}

// CleanText makes s storable as text: valid UTF-8 without NUL, at most
// MaxText bytes (cut on a rune boundary, marked with "…").
func CleanText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= MaxText {
		return s
	}
	cut := MaxText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
