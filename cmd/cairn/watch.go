package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// Websocket timings. The server pings every 54 s; a connection silent for
// twice that is taken for lost.
const (
	wsReadWait  = 2 * time.Minute
	wsWriteWait = 5 * time.Second
)

func init() {
	commands = append(commands, &command{name: "watch", args: "[--run RUN] [--queue Q]",
		short: "Print task transitions live, one line each, until interrupted",
		flags: func(fs *flag.FlagSet) {
			fs.String("run", "", "only the transitions of this `run`")
			fs.String("queue", "", "only the transitions of this `queue`")
		},
		do: watch})
}

// event is one task transition as the websocket sends it.
type event struct {
	TaskID   int64  `json:"task_id"`
	RunID    int64  `json:"run_id"`
	From     string `json:"from"`
	To       string `json:"to"`
	Queue    string `json:"queue"`
	Attempt  int    `json:"attempt"`
	WorkerID int64  `json:"worker_id,omitempty"`
}

// watchLine is an event as `watch --json` prints it: one JSON object a
// line, with the time it was received.
type watchLine struct {
	At time.Time `json:"at"`
	event
}

// Reconnection: after a lost connection watch dials again after
// reconnectMin, doubling up to reconnectMax, each wait jittered by ±20%,
// and gives up once it has had no connection for reconnectGiveUp.
const (
	reconnectMin    = 250 * time.Millisecond
	reconnectMax    = 10 * time.Second
	reconnectGiveUp = 5 * time.Minute
)

func watch(ctx context.Context, c *cli, o opts, _ []string) error {
	var runID int64
	if v := o.str("run"); v != "" {
		id, err := parseID(c.cmd, "run", v)
		if err != nil {
			return err
		}
		runID = id
	}
	queue := o.str("queue")

	conn, err := c.client.dial(ctx)
	if err != nil {
		return err
	}
	for again := false; ; again = true {
		lost, err := c.follow(ctx, conn, runID, queue, again)
		if err != nil || lost == nil {
			return err
		}
		// Said once per lost connection, not once per try.
		fmt.Fprintf(c.stderr, "%v; reconnecting (Ctrl-C to stop)\n", lost)
		if conn, err = c.reconnect(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while reconnecting
			}
			return err
		}
	}
}

// follow prints the transitions conn delivers until it ends. It returns
// nil, nil on an interrupt, the lost connection's error (lost) when the
// server went away or the connection broke, and an error (err) when
// watching cannot go on. again says the connection replaces a lost one.
func (c *cli) follow(ctx context.Context, conn *websocket.Conn, runID int64, queue string, again bool) (lost, err error) {
	defer conn.Close()
	// An interrupt closes the connection politely, which ends the read.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(wsWriteWait))
		_ = conn.Close()
	})
	defer stop()

	_ = conn.SetReadDeadline(time.Now().Add(wsReadWait))
	conn.SetPingHandler(func(data string) error {
		_ = conn.SetReadDeadline(time.Now().Add(wsReadWait))
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(wsWriteWait))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil // interrupted: the normal end
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return fmt.Errorf("the server closed the connection: %s", cmpStr(ce.Text, strconv.Itoa(ce.Code))), nil
			}
			return fmt.Errorf("connection to %s lost: %w", c.client.base.Redacted(), err), nil
		}
		_ = conn.SetReadDeadline(time.Now().Add(wsReadWait))
		var msg struct {
			T      string  `json:"t"`
			Events []event `json:"events"`
		}
		if err := json.Unmarshal(data, &msg); err != nil {
			return nil, fmt.Errorf("watch: the server sent a message cairn cannot read: %w", err)
		}
		switch msg.T {
		case "hello":
			if again {
				fmt.Fprintf(c.stderr, "reconnected to %s; transitions while disconnected are not shown\n", c.client.base.Redacted())
			} else {
				fmt.Fprintf(c.stderr, "watching %s (Ctrl-C to stop)\n", c.client.base.Redacted())
			}
		case "resync":
			fmt.Fprintln(c.stderr, "some transitions were dropped: the server sent them faster than this client read them")
		case "events":
			now := time.Now()
			for _, ev := range msg.Events {
				if (runID != 0 && ev.RunID != runID) || (queue != "" && ev.Queue != queue) {
					continue
				}
				if err := c.printEvent(now, ev); err != nil {
					return nil, err
				}
			}
		}
	}
}

// reconnect dials the websocket again until it connects, with backoff and
// jitter (see reconnectMin), quietly. It gives up at once on an answer
// another try would get too (a wrong password), and after
// reconnectGiveUp on the others.
func (c *cli) reconnect(ctx context.Context) (*websocket.Conn, error) {
	giveUp := time.Now().Add(reconnectGiveUp)
	for delay := reconnectMin; ; delay = min(2*delay, reconnectMax) {
		wait := time.NewTimer(time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64())))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		case <-wait.C:
		}
		conn, err := c.client.dial(ctx)
		if err == nil {
			return conn, nil
		}
		var te *transientError
		if !errors.As(err, &te) {
			return nil, err
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("watch: no connection for %s, giving up: %w", reconnectGiveUp, err)
		}
	}
}

// transientError is a failed dial that a later try may not meet: the
// server could not be reached, or answered with a 5xx.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// printEvent prints one transition line.
func (c *cli) printEvent(at time.Time, ev event) error {
	if c.json {
		b, err := json.Marshal(watchLine{At: at, event: ev})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "%s\n", b)
		return err
	}
	from := cmpStr(ev.From, "(new)")
	line := fmt.Sprintf("%s  run %d  task %d  %s → %s  queue %s  attempt %d",
		at.Local().Format("2006-01-02 15:04:05.000"), ev.RunID, ev.TaskID, from, ev.To, ev.Queue, ev.Attempt)
	if ev.WorkerID != 0 {
		line += "  worker " + strconv.FormatInt(ev.WorkerID, 10)
	}
	_, err := fmt.Fprintln(c.stdout, line)
	return err
}

// dial opens the site's websocket (/ws) with the client's credentials,
// asking for the password once on a 401 like call does.
func (cl *client) dial(ctx context.Context) (*websocket.Conn, error) {
	u := *cl.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path += "/ws"
	d := *websocket.DefaultDialer
	d.HandshakeTimeout = requestTimeout
	for {
		h := http.Header{}
		h.Set("User-Agent", "cairn-cli")
		cl.authorize(h)
		conn, res, err := d.DialContext(ctx, u.String(), h)
		if err == nil {
			return conn, nil
		}
		if res == nil {
			return nil, &transientError{cl.netError(ctx, err)}
		}
		if res.StatusCode == http.StatusUnauthorized && cl.askPassword() {
			res.Body.Close()
			continue
		}
		if res.StatusCode >= 200 && res.StatusCode < 300 || res.StatusCode == http.StatusSwitchingProtocols {
			res.Body.Close()
			return nil, fmt.Errorf("watch: websocket handshake with %s failed: %w", cl.base.Redacted(), err)
		}
		_, err = cl.read(res)
		if res.StatusCode >= 500 {
			return nil, &transientError{err}
		}
		return nil, err
	}
}
