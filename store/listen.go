package store

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Reconnect pacing of a Listener: lib/pq waits listenRetryMin after the
// first failed attempt and doubles the wait up to listenRetryMax; the
// Listener adds a random wait of up to half as much again, so that the
// engines of a cluster do not reconnect in step after an outage.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// Listener holds one dedicated LISTEN connection and hands every
// notification to a callback. It reconnects by itself, with growing,
// jittered waits, and logs one line when the connection drops and one when
// it is back (failed attempts in between log at debug level); after a
// reconnect OnReconnect is called, since notifications may have been
// missed.
type Listener struct {
	l         *pq.Listener
	logger    *slog.Logger
	done      chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
}

// Notification is one NOTIFY received.
type Notification struct {
	Channel string
	Payload string
}

// ListenParams configure a Listener.
type ListenParams struct {
	DSN         string
	Channels    []string
	Logger      *slog.Logger
	OnNotify    func(Notification)
	OnReconnect func()
}

// Listen connects and LISTENs on p.Channels.
func Listen(ctx context.Context, p ListenParams) (*Listener, error) {
	if _, err := pq.ParseURL(p.DSN); err != nil && !looksLikeKeyValue(p.DSN) {
		return nil, fmt.Errorf("listen: bad database URL: %w", err)
	}
	logger := p.Logger
	closing := make(chan struct{})
	var (
		downSince time.Time // zero while connected
		tries     int       // failed attempts since the connection dropped
	)
	// lib/pq calls back from its one connection goroutine, so the state
	// above needs no lock; a wait here delays its next attempt.
	l := pq.NewListener(p.DSN, listenRetryMin, listenRetryMax, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			downSince, tries = time.Now(), 0
			logger.Warn("listener disconnected", slog.Any("error", err))
		case pq.ListenerEventReconnected:
			logger.Info("listener reconnected", slog.Duration("down_for", time.Since(downSince).Round(time.Millisecond)),
				slog.Int("tries", tries+1))
			downSince, tries = time.Time{}, 0
			if p.OnReconnect != nil {
				p.OnReconnect()
			}
		case pq.ListenerEventConnectionAttemptFailed:
			tries++
			logger.Debug("listener reconnect failed", slog.Int("tries", tries), slog.Any("error", err))
			jitter(closing, listenJitter(tries, rand.Float64()))
		}
	})
	for _, ch := range p.Channels {
		if err := l.Listen(ch); err != nil {
			l.Close()
			return nil, fmt.Errorf("listen on %s: %w", ch, err)
		}
	}
	ln := &Listener{l: l, logger: logger, done: make(chan struct{}), closing: closing}
	go func() {
		defer close(ln.done)
		for n := range l.Notify {
			if n == nil { // reconnected; OnReconnect already ran
				continue
			}
			p.OnNotify(Notification{Channel: n.Channel, Payload: n.Extra})
		}
	}()
	return ln, nil
}

// listenJitter is the random wait added after the n-th failed attempt in a
// row: r (in [0, 1)) times half of lib/pq's own wait for it.
func listenJitter(n int, r float64) time.Duration {
	wait := listenRetryMax
	if n <= 16 {
		wait = min(listenRetryMin<<(n-1), listenRetryMax)
	}
	return time.Duration(r * float64(wait/2))
}

// jitter waits d, or less when closing is closed.
func jitter(closing <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-closing:
	}
}

func looksLikeKeyValue(dsn string) bool {
	for _, c := range dsn {
		if c == '=' {
			return true
		}
	}
	return false
}

// Add starts listening on another channel.
func (l *Listener) Add(channel string) error {
	if err := l.l.Listen(channel); err != nil && err != pq.ErrChannelAlreadyOpen {
		return fmt.Errorf("listen on %s: %w", channel, err)
	}
	return nil
}

// Close stops listening and waits for the callback goroutine to end.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closing) })
	err := l.l.Close()
	<-l.done
	return err
}
