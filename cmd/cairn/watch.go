package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
				return nil // interrupted: the normal end
			}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return fmt.Errorf("the server closed the connection: %s", cmpStr(ce.Text, strconv.Itoa(ce.Code)))
			}
			return fmt.Errorf("watch: connection to %s lost: %w", c.client.base.Redacted(), err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(wsReadWait))
		var msg struct {
			T      string  `json:"t"`
			Events []event `json:"events"`
		}
		if err := json.Unmarshal(data, &msg); err != nil {
			return fmt.Errorf("watch: the server sent a message cairn cannot read: %w", err)
		}
		switch msg.T {
		case "hello":
			fmt.Fprintf(c.stderr, "watching %s (Ctrl-C to stop)\n", c.client.base.Redacted())
		case "resync":
			fmt.Fprintln(c.stderr, "some transitions were dropped: the server sent them faster than this client read them")
		case "events":
			now := time.Now()
			for _, ev := range msg.Events {
				if (runID != 0 && ev.RunID != runID) || (queue != "" && ev.Queue != queue) {
					continue
				}
				if err := c.printEvent(now, ev); err != nil {
					return err
				}
			}
		}
	}
}

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
			return nil, cl.netError(ctx, err)
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
		return nil, err
	}
}
