package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/store"
)

// injectCrash stops PostgreSQL the way a crash would (pg_ctl stop -m
// immediate: no shutdown checkpoint, sessions cut) and starts it again
// after window; the start runs crash recovery.
func injectCrash(ctx context.Context, e *env, window time.Duration) error {
	if e.srv.cluster == nil {
		return fmt.Errorf("crash needs a private cluster")
	}
	down := time.Now()
	if err := e.srv.cluster.StopImmediate(); err != nil {
		return err
	}
	if err := sleep(ctx, window-time.Since(down)); err != nil {
		return err
	}
	if err := e.srv.cluster.StartAgain(ctx); err != nil {
		return err
	}
	e.notef("server down %s", time.Since(down).Round(100*time.Millisecond))
	return nil
}

// injectBackendKills terminates every backend of the workers every 250 ms
// for window (pg_terminate_backend).
func injectBackendKills(ctx context.Context, e *env, window time.Duration) error {
	end := time.Now().Add(window)
	var killed int64
	for time.Now().Before(end) {
		var n int64
		if err := e.ctrl.QueryRowContext(ctx, sqlTerminateWorkers).Scan(&n); err != nil {
			return fmt.Errorf("terminate backends: %w", err)
		}
		killed += n
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	e.notef("%d worker backends terminated", killed)
	return nil
}

// injectPoolExhaustion opens connections to the server until it refuses
// more and holds them idle for window. Workers keep the connections they
// have; every new one is refused.
func injectPoolExhaustion(ctx context.Context, e *env, window time.Duration) error {
	hogURL, err := withApp(e.srv.url, "", "chaos-hog")
	if err != nil {
		return err
	}
	hog, err := store.Open(ctx, hogURL, 10*time.Second)
	if err != nil {
		return err
	}
	defer hog.Close()
	hog.SetMaxIdleConns(0)
	start := time.Now()
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var refused error
	for len(held) < 5000 {
		c, err := hog.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			if c != nil {
				c.Close()
			}
			refused = err
			break
		}
		held = append(held, c)
	}
	if refused == nil {
		return fmt.Errorf("the server still accepted connections after %d", len(held))
	}
	if err := sleep(ctx, window-time.Since(start)); err != nil {
		return err
	}
	e.notef("%d connection slots held (then: %v)", len(held), refused)
	return nil
}

// injectSigkill SIGKILLs one worker and starts a replacement at once;
// the dead worker's tasks wait for their lease to expire.
func injectSigkill(ctx context.Context, e *env, window time.Duration) error {
	start := time.Now()
	w := e.workers[0]
	e.awaitHeld(ctx, w)
	e.kill(w)
	if err := e.start(ctx, w, true); err != nil {
		return err
	}
	e.notef("%s SIGKILLed and replaced", w.name)
	return sleep(ctx, window-time.Since(start))
}

// injectRepeatedKills SIGKILLs a worker and restarts it, round robin over
// the workers, four times over window.
func injectRepeatedKills(ctx context.Context, e *env, window time.Duration) error {
	const kills = 4
	for i := range kills {
		w := e.workers[i%len(e.workers)]
		e.awaitHeld(ctx, w)
		e.kill(w)
		if err := e.start(ctx, w, false); err != nil {
			return err
		}
		if err := sleep(ctx, window/kills); err != nil {
			return err
		}
	}
	e.notef("%d SIGKILLs, each worker restarted at once", kills)
	return nil
}

// injectLostAcks makes every worker's proxy cut the connection instead of
// relaying every 10th answer that reports a commit (a statement outside a
// transaction block, or a COMMIT): the work is committed and the worker is
// told nothing.
func injectLostAcks(ctx context.Context, e *env, window time.Duration) error {
	for _, w := range e.workers {
		w.proxy.lost.Store(0)
		w.proxy.loseEvery.Store(10)
	}
	err := sleep(ctx, window)
	var lost int64
	for _, w := range e.workers {
		w.proxy.loseEvery.Store(0)
		lost += w.proxy.lost.Load()
	}
	if err != nil {
		return err
	}
	if lost == 0 {
		return fmt.Errorf("no commit acknowledgement was lost")
	}
	e.notef("%d commit acknowledgements lost", lost)
	return nil
}

// injectPartition blackholes one worker's traffic (both ways, new
// connections too) for window, longer than the lease, so its tasks are
// rescued by the others; then it heals and the worker's held messages
// (late completions among them) arrive.
func injectPartition(ctx context.Context, e *env, window time.Duration) error {
	w := e.workers[0]
	e.awaitHeld(ctx, w)
	var before int64
	if err := e.ctrl.QueryRowContext(ctx, sqlCountRescues).Scan(&before); err != nil {
		return err
	}
	w.proxy.partition()
	err := sleep(ctx, window)
	w.proxy.heal()
	e.cameBack, e.backAt = w, time.Now()
	if err != nil {
		return err
	}
	var after int64
	if err := e.ctrl.QueryRowContext(ctx, sqlCountRescues).Scan(&after); err != nil {
		return err
	}
	e.notef("%s partitioned for %s; %d tasks rescued meanwhile", w.name, window, after-before)
	return nil
}

// awaitHeld waits, a second at most, until w holds a task, so that the
// fault interrupts work in flight.
func (e *env) awaitHeld(ctx context.Context, w *worker) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		var n int64
		if err := e.ctrl.QueryRowContext(ctx, sqlCountHeld, w.name).Scan(&n); err == nil && n > 0 {
			return
		}
		if sleep(ctx, 20*time.Millisecond) != nil { // poll interval of a condition with a deadline
			return
		}
	}
}
