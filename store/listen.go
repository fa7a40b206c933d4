package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lib/pq"
)

// Listener holds one dedicated LISTEN connection and hands every
// notification to a callback. It reconnects by itself; after a reconnect
// OnReconnect is called, since notifications may have been missed.
type Listener struct {
	l      *pq.Listener
	logger *slog.Logger
	done   chan struct{}
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
	l := pq.NewListener(p.DSN, 100*time.Millisecond, 5*time.Second, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			logger.Warn("listener disconnected", slog.Any("error", err))
		case pq.ListenerEventReconnected:
			logger.Info("listener reconnected")
			if p.OnReconnect != nil {
				p.OnReconnect()
			}
		case pq.ListenerEventConnectionAttemptFailed:
			logger.Debug("listener reconnect failed", slog.Any("error", err))
		}
	})
	for _, ch := range p.Channels {
		if err := l.Listen(ch); err != nil {
			l.Close()
			return nil, fmt.Errorf("listen on %s: %w", ch, err)
		}
	}
	ln := &Listener{l: l, logger: logger, done: make(chan struct{})}
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
	err := l.l.Close()
	<-l.done
	return err
}
