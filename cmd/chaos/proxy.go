package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxy is a TCP proxy on loopback between one worker and PostgreSQL. It
// reads the PostgreSQL wire protocol message by message, so that it can
// blackhole the worker's traffic (a partition: messages are held, not
// dropped, and flow again when it heals, as on a real network whose TCP
// connections outlive the partition) and cut a connection once the server
// has committed a statement or a COMMIT, dropping its answer (a commit
// whose acknowledgement is lost).
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	healed  chan struct{} // closed while traffic flows
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	commits atomic.Int64 // committed answers relayed or dropped
	lost    atomic.Int64 // committed answers dropped
	// loseEvery, when > 0, drops every n-th committed answer.
	loseEvery atomic.Int64
}

// newProxy listens on a free loopback port and forwards to target.
func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	healed := make(chan struct{})
	close(healed)
	p := &proxy{ln: ln, target: target, healed: healed, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's listening address.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// partition holds every message in both directions until heal.
func (p *proxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		p.healed = make(chan struct{})
	default:
	}
}

// heal lets the held messages and new ones flow again.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
	default:
		close(p.healed)
	}
}

// gate blocks while the proxy is partitioned; false once it is closed.
func (p *proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.healed, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// close stops listening, heals and cuts every connection.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.heal()
	p.ln.Close()
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

// serve relays one connection. The client's first message (the startup
// message) has no type byte; every later message in both directions is a
// type byte and a length that counts itself.
func (p *proxy) serve(client net.Conn) {
	if !p.gate() { // a partition also blackholes new connections
		client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		client.Close()
		server.Close()
		return
	}
	defer func() {
		client.Close()
		server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer client.Close()
		defer server.Close()
		p.relayAnswers(server, client)
	}()
	first := true
	for {
		_, msg, err := readMessage(client, !first)
		if err != nil || !p.gate() {
			break
		}
		first = false
		if _, err := server.Write(msg); err != nil {
			break
		}
	}
	server.Close()
	<-done
}

// relayAnswers relays the server's messages to the client one answer at a
// time: what the server sends up to its ReadyForQuery is held, then sent
// whole. When the answer completed a statement outside a transaction block
// or a COMMIT (ReadyForQuery says idle: the work is committed) and it is
// the loseEvery-th such answer, it is dropped and both connections cut
// instead: the client never learns that its transaction committed.
// Asynchronous messages (notifications, notices, parameter changes) pass
// at once between answers.
func (p *proxy) relayAnswers(server, client net.Conn) {
	var held []byte
	completed := false
	defer func() {
		if len(held) > 0 { // a FATAL error before the server hangs up
			_, _ = client.Write(held)
		}
	}()
	for {
		typ, msg, err := readMessage(server, true)
		if err != nil || !p.gate() {
			return
		}
		switch typ {
		case 'A', 'N', 'S':
			if len(held) == 0 {
				if _, err := client.Write(msg); err != nil {
					return
				}
				continue
			}
		case 'C':
			completed = true
		case 'Z':
			if completed && len(msg) > 5 && msg[5] == 'I' {
				n, every := p.commits.Add(1), p.loseEvery.Load()
				if every > 0 && n%every == 0 {
					p.lost.Add(1)
					held = nil
					return
				}
			}
			held = append(held, msg...)
			if _, err := client.Write(held); err != nil {
				held = nil
				return
			}
			held, completed = held[:0], false
			continue
		}
		held = append(held, msg...)
	}
}

// readMessage reads one protocol message whole (type byte, when typed,
// included).
func readMessage(r io.Reader, typed bool) (byte, []byte, error) {
	head := 4
	if typed {
		head = 5
	}
	buf := make([]byte, head, 64)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(buf[head-4:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("bad message length")
	}
	msg := make([]byte, head+n-4)
	copy(msg, buf)
	if _, err := io.ReadFull(r, msg[head:]); err != nil {
		return 0, nil, err
	}
	var typ byte
	if typed {
		typ = msg[0]
	}
	return typ, msg, nil
}
