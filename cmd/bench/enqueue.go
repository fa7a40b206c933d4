package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// enqueueConcurrent is scenario enqueue: -enqueue-clients goroutines each
// call Enqueue (one run, one transaction) back to back for
// -enqueue-duration, as request handlers of a web service do. The engine
// runs no worker, so this times the insert path and its commits alone:
// what concurrent commits cost each other (a NOTIFY in the transaction
// serializes the commits of the whole cluster; see store/listeners.go).
func (b *bench) enqueueConcurrent(ctx context.Context) error {
	s, drop, err := b.newDB(ctx, "enqueue")
	if err != nil {
		return err
	}
	defer drop()
	eng, err := engine.New(s.sql, engine.Config{DatabaseURL: s.url, NoWorker: true, Logger: b.engineLogger(), Retention: -1})
	if err != nil {
		return err
	}
	var none atomic.Int64
	if err := eng.Register(noopWorkflow("single", counting(&none))); err != nil {
		return err
	}
	if err := eng.Start(ctx); err != nil {
		return err
	}
	defer shutdown(eng)

	clients, d := b.o.enqClients, b.o.enqDuration
	// Each way one run at a time, then 1,000 runs a call: Engine.Enqueue
	// and EnqueueMany, and the SQL API's cairn.enqueue (one statement, as
	// another language's client sends it).
	const batch = 1000
	many := make([]engine.EnqueueParams, batch)
	for i := range many {
		many[i] = engine.EnqueueParams{Workflow: "single"}
	}
	ways := []struct {
		name string
		runs int
		call func() error
	}{
		{"Enqueue", 1, func() error { _, err := eng.Enqueue(ctx, "single", nil); return err }},
		{"SQL cairn.enqueue", 1, func() error { _, err := s.sql.ExecContext(ctx, `SELECT cairn.enqueue('single')`); return err }},
		{fmt.Sprintf("EnqueueMany of %d", batch), batch, func() error { _, err := eng.EnqueueMany(ctx, many); return err }},
		{fmt.Sprintf("SQL cairn.enqueue × %d in one statement", batch), batch, func() error {
			_, err := s.sql.ExecContext(ctx, `SELECT cairn.enqueue('single') FROM generate_series(1, $1)`, batch)
			return err
		}},
	}
	for _, w := range ways {
		var mu sync.Mutex
		var lat []time.Duration
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(d)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for ctx.Err() == nil && time.Now().Before(deadline) {
					t0 := time.Now()
					if err := w.call(); err != nil {
						failed.Add(1)
						continue
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		took := time.Since(start)
		if n := failed.Load(); n > 0 {
			return fmt.Errorf("enqueue: %d calls of %s failed", n, w.name)
		}
		p50, _, p99 := percentiles(lat)
		b.add("enqueue", fmt.Sprintf("%d clients × %s (one commit a call), %s", clients, w.name, d),
			perSec(float64(len(lat)*w.runs)/took.Seconds()), "", "")
		b.add("enqueue", w.name+" call p50 / p99", ms(p50)+" / "+ms(p99), "", "")
	}
	return nil
}
