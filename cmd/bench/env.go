package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
)

const schema = migrations.DefaultSchema

// scratch is one scenario's fresh database.
type scratch struct {
	name string
	url  string
	sql  *sql.DB
	q    *benchdb.DB
	// taskFloor is the highest task id of a seeded history (0: none):
	// the burn-down measures only the tasks above it.
	taskFloor int64
}

// newDB creates and migrates a fresh database; drop removes it.
func (b *bench) newDB(ctx context.Context, scenario string) (*scratch, func(), error) {
	b.seq++
	name := fmt.Sprintf("cairn_bench_%s_%d_%d", scenario, os.Getpid(), b.seq)
	url, err := b.srv.CreateDatabase(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	drop := func() {
		if err := b.srv.DropDatabase(context.Background(), name); err != nil {
			b.log.Warn("drop database", slog.String("db", name), slog.Any("error", err))
		}
	}
	db, err := openPool(ctx, url)
	if err != nil {
		drop()
		return nil, nil, err
	}
	r, err := migrations.NewRunner(db, schema)
	if err == nil {
		_, err = r.Up(ctx, 0)
	}
	if err != nil {
		db.Close()
		drop()
		return nil, nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	q, _ := benchdb.New(db, schema)
	s := &scratch{name: name, url: url, sql: db, q: q}
	if b.o.pgStats && !q.EnableStatements(ctx) {
		b.log.Warn("pg_stat_statements is not available (preload it with -pg shared_preload_libraries=pg_stat_statements)")
	}
	return s, func() {
		if b.o.pgStats {
			b.printStatements(scenario, s)
		}
		db.Close()
		drop()
	}, nil
}

// openPool opens a pool sized for an engine plus the bench's own queries:
// database/sql keeps only 2 idle connections by default, which makes a
// busy engine reconnect all the time.
func openPool(ctx context.Context, url string) (*sql.DB, error) {
	db, err := store.Open(ctx, url, 10*time.Second)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(100)
	db.SetMaxIdleConns(100)
	return db, nil
}

func (b *bench) printStatements(scenario string, s *scratch) {
	st, err := s.q.TopStatements(context.Background(), 12)
	if err != nil {
		b.log.Warn("pg_stat_statements", slog.Any("error", err))
		return
	}
	fmt.Fprintf(b.out, "\n[%s] top statements (pg_stat_statements)\n", scenario)
	for _, r := range st {
		fmt.Fprintf(b.out, "  calls=%-8d rows=%-9d plans=%-5d bufs=%-10d plan=%8.0fms exec=%8.0fms mean=%6.2fms wal=%5.0fMB  %s\n",
			r.Calls, r.Rows, r.Plans, r.Buffers, r.PlanMs, r.ExecMs, r.MeanMs, float64(r.WALBytes)/1e6, r.Query)
	}
}

// engineLogger is the bench logger for engines: their info lines (start,
// stop) are kept, per-task noise is not.
func (b *bench) engineLogger() *slog.Logger { return b.log.With(slog.String("component", "engine")) }

// newEngine builds an engine with slots on the default queue.
func (b *bench) newEngine(s *scratch, slots int, wfs ...engine.Workflow) (*engine.Engine, error) {
	return b.newEngineBatch(s, slots, b.o.batch, wfs...)
}

// newEngineBatch is newEngine with a completion batch (0: the engine's
// default).
func (b *bench) newEngineBatch(s *scratch, slots, batch int, wfs ...engine.Workflow) (*engine.Engine, error) {
	eng, err := engine.New(s.sql, engine.Config{
		DatabaseURL:     s.url,
		Queues:          map[string]engine.QueueConfig{engine.DefaultQueue: {Slots: slots}},
		CompletionBatch: batch,
		Logger:          b.engineLogger(),
		ShutdownGrace:   10 * time.Second,
		Retention:       -1,
	})
	if err != nil {
		return nil, err
	}
	for _, wf := range wfs {
		if err := eng.Register(wf); err != nil {
			return nil, err
		}
	}
	return eng, nil
}

func shutdown(eng *engine.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = eng.Shutdown(ctx)
}

// counting returns a no-op handler that counts its calls.
func counting(n *atomic.Int64) engine.Handler {
	return func(context.Context, *engine.TaskHandle) error {
		n.Add(1)
		return nil
	}
}

// noopWorkflow is a one-task workflow.
func noopWorkflow(name string, h engine.Handler) engine.Workflow {
	return engine.Workflow{Name: name, Tasks: []engine.Task{{Name: "t", Run: h}}}
}

// fanWorkflow is 1 root -> 8 parallel -> 1 join; flat, the same 10
// tasks without dependencies.
func fanWorkflow(name string, h engine.Handler, flat bool) engine.Workflow {
	tasks := []engine.Task{{Name: "root", Run: h}}
	join := engine.Task{Name: "join", Run: h}
	for i := range 8 {
		n := "p" + strconv.Itoa(i)
		tasks = append(tasks, engine.Task{Name: n, Deps: []string{"root"}, Run: h})
		join.Deps = append(join.Deps, n)
	}
	tasks = append(tasks, join)
	if flat {
		for i := range tasks {
			tasks[i].Deps = nil
		}
	}
	return engine.Workflow{Name: name, Tasks: tasks}
}

// enqueueLoad enqueues k runs of workflow in one EnqueueMany, the i-th
// of them (counting from from) with input(i) (no input when input is
// nil), reusing ps's array, which it returns.
func enqueueLoad(ctx context.Context, eng *engine.Engine, workflow string, from, k int64, input func(i int64) any, ps []engine.EnqueueParams) ([]engine.EnqueueParams, error) {
	ps = ps[:0]
	for i := range k {
		var in any
		if input != nil {
			in = input(from + i)
		}
		ps = append(ps, engine.EnqueueParams{Workflow: workflow, Input: in})
	}
	_, err := eng.EnqueueMany(ctx, ps)
	return ps, err
}

// enqueueN enqueues n runs of workflow in batches; input(i) gives run i's
// input (nil: {}).
func (b *bench) enqueueN(ctx context.Context, eng *engine.Engine, workflow string, n int, input func(i int) any, progress *atomic.Int64) error {
	batch := max(b.o.enqBatch, 1)
	ps := make([]engine.EnqueueParams, 0, batch)
	for i := 0; i < n; i += batch {
		ps = ps[:0]
		for j := i; j < min(i+batch, n); j++ {
			var in any
			if input != nil {
				in = input(j)
			}
			ps = append(ps, engine.EnqueueParams{Workflow: workflow, Input: in})
		}
		if _, err := eng.EnqueueMany(ctx, ps); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		if progress != nil {
			progress.Add(int64(len(ps)))
		}
	}
	return nil
}

// progress logs done/total and rates every second until stop is called.
func (b *bench) progress(label string, total int64, done func() int64) (stop func()) {
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		last, lastAt := done(), start
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				d := done()
				attrs := []any{slog.String("phase", label), slog.Int64("done", d)}
				if total > 0 {
					attrs = append(attrs, slog.Int64("total", total))
				}
				attrs = append(attrs,
					slog.String("rate", fmt.Sprintf("%.0f/s", float64(d-last)/now.Sub(lastAt).Seconds())),
					slog.String("avg", fmt.Sprintf("%.0f/s", float64(d)/now.Sub(start).Seconds())))
				b.log.Info("progress", attrs...)
				last, lastAt = d, now
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// waitStatus waits until want tasks are in status: it polls hint (cheap,
// in-process) until it reaches want, then the database.
func waitStatus(ctx context.Context, s *scratch, status string, want int64, hint func() int64) error {
	return waitCount(ctx, want, hint, func(ctx context.Context) (int64, error) { return s.q.CountStatus(ctx, status) })
}

// waitCompletedAfter waits until want tasks above the scratch's task
// floor completed: it polls hint until it reaches want, then their events.
func waitCompletedAfter(ctx context.Context, s *scratch, want int64, hint func() int64) error {
	return waitCount(ctx, want, hint, func(ctx context.Context) (int64, error) { return s.q.CountCompletedAfter(ctx, s.taskFloor) })
}

// waitCount polls hint (when not nil) and then count, every 20 ms, until
// each reaches want or ctx ends.
func waitCount(ctx context.Context, want int64, hint func() int64, count func(context.Context) (int64, error)) error {
	tick := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
			return nil
		}
	}
	for hint != nil && hint() < want {
		if err := tick(); err != nil {
			return err
		}
	}
	for {
		n, err := count(ctx)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if err := tick(); err != nil {
			return err
		}
	}
}

// rssMB returns this process's resident set size in MB.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}

// cpuTimes reads the machine's busy and total CPU time (all cores) from
// /proc/stat, in clock ticks.
func cpuTimes() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

// cpuMeter measures the machine's CPU use over an interval.
type cpuMeter struct{ busy, total float64 }

func startCPU() cpuMeter {
	b, t := cpuTimes()
	return cpuMeter{b, t}
}

// stop returns the busy share of the machine (0-1) and the busy CPU
// seconds since start.
func (m cpuMeter) stop() (share, seconds float64) {
	b, t := cpuTimes()
	if t == m.total {
		return 0, 0
	}
	const ticks = 100 // USER_HZ
	return (b - m.busy) / (t - m.total), (b - m.busy) / ticks
}

// stackMB returns the memory of goroutine stacks, in MB.
func stackMB() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.StackInuse) / 1e6
}

func heapMB() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / 1e6
}

// percentiles returns p50, p95, p99 of ds.
func percentiles(ds []time.Duration) (p50, p95, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return at(0.50), at(0.95), at(0.99)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func perSec(v float64) string { return fmt.Sprintf("%.0f/s", v) }
