// Package logcapture keeps the log lines a handler writes during one
// attempt, for the attempt's event (its detail, with a panic's stack),
// and passes each record on to the engine's logger and each kept line
// to the live log. It knows nothing of the public handle: the engine
// gives it the next handler and where live lines go.
package logcapture

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// MaxLines bounds what one attempt's log keeps.
const MaxLines = 200

// Line is one captured log line as the attempt's event stores it.
type Line struct {
	At    time.Time      `json:"at"`
	Level string         `json:"level"`
	Msg   string         `json:"msg"`
	Attrs map[string]any `json:"attrs,omitempty"`
}

// Log is one attempt's captured lines; its zero value is empty and
// ready.
type Log struct {
	mu    sync.Mutex
	lines []Line
}

// Detail is what the attempt's event stores: the log and a panic stack.
func (l *Log) Detail(stack []byte) json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 && stack == nil {
		return nil
	}
	d := map[string]any{}
	if len(l.lines) > 0 {
		d["log"] = l.lines
	}
	if stack != nil {
		d["stack"] = string(stack)
	}
	b, _ := json.Marshal(d)
	return b
}

// Handler returns a handler that keeps records in l (up to MaxLines),
// hands each kept line to live (when not nil), and passes every record
// on to next where next is enabled for its level.
func (l *Log) Handler(next slog.Handler, live func(Line)) slog.Handler {
	return &captureHandler{log: l, next: next, live: live}
}

// captureHandler keeps a handler's log records for the attempt and passes
// them on to the engine's logger.
type captureHandler struct {
	log   *Log
	next  slog.Handler
	live  func(Line)
	attrs []slog.Attr
}

func (c *captureHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (c *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	line := Line{At: r.Time, Level: r.Level.String(), Msg: r.Message}
	if n := r.NumAttrs() + len(c.attrs); n > 0 {
		line.Attrs = make(map[string]any, n)
		for _, a := range c.attrs {
			line.Attrs[a.Key] = a.Value.Resolve().Any()
		}
		r.Attrs(func(a slog.Attr) bool {
			line.Attrs[a.Key] = fmt.Sprint(a.Value.Resolve().Any())
			return true
		})
	}
	c.log.mu.Lock()
	kept := len(c.log.lines) < MaxLines
	if kept {
		c.log.lines = append(c.log.lines, line)
	}
	c.log.mu.Unlock()
	if kept && c.live != nil {
		c.live(line) // shown live on the task page
	}
	if c.next.Enabled(ctx, r.Level) {
		return c.next.Handle(ctx, r)
	}
	return nil
}

func (c *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{log: c.log, next: c.next.WithAttrs(as), live: c.live, attrs: append(append([]slog.Attr{}, c.attrs...), as...)}
}

func (c *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{log: c.log, next: c.next.WithGroup(name), live: c.live, attrs: c.attrs}
}
