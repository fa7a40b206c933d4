package main

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/cmd/bench/internal/ceiling"
	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// ceilingVariant is one pgbench script of the ceiling scenario.
type ceilingVariant struct {
	name   string // as -ceiling-variants names it
	label  string
	render func(*store.Store, ceiling.Params) (ceiling.Script, error)
	// window measures the work done, from the events or the task rows.
	window func(*benchdb.DB, context.Context) (benchdb.Window, error)
	// setup is SQL run on the seeded database before pgbench ("": none).
	setup string
	// keyed seeds tasks with concurrency keys, as the keyed scenario.
	keyed bool
}

// ceilingScripts are the ceiling's variants, in the order they run.
var ceilingScripts = []ceilingVariant{
	{name: "cairn", label: "Cairn's statements", render: ceiling.Cairn, window: (*benchdb.DB).EventWindow},
	{name: "bare", label: "bare floor", render: ceiling.Bare, window: (*benchdb.DB).TaskWindow},
	{name: "keyed", label: "Cairn's keyed statements", render: ceiling.CairnKeyed, window: (*benchdb.DB).EventWindow, keyed: true},
}

// ceilingVariants returns the variants that list (comma-separated names)
// picks, in their own order.
func ceilingVariants(list string) ([]ceilingVariant, error) {
	picked := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		picked[strings.TrimSpace(n)] = true
	}
	var out []ceilingVariant
	for _, v := range ceilingScripts {
		if picked[v.name] {
			out = append(out, v)
			delete(picked, v.name)
		}
	}
	for n := range picked {
		return nil, fmt.Errorf("-ceiling-variants: unknown variant %q (want cairn, bare or keyed)", n)
	}
	return out, nil
}

// ceiling measures what PostgreSQL alone does with the burn-down's work:
// pgbench clients that each, per transaction, complete the batch they
// claimed in the previous one and claim the next. Once with Cairn's own
// statements, once with the bare task row updates (the floor of a SKIP
// LOCKED queue on this machine). Each runs on N seeded one-task runs.
func (b *bench) ceiling(ctx context.Context) error {
	if b.o.ceilClients < 1 || b.o.ceilBatch < 1 {
		return fmt.Errorf("-ceiling-clients and -ceiling-batch must be at least 1 (got %d and %d)", b.o.ceilClients, b.o.ceilBatch)
	}
	perClient := b.o.n / (b.o.ceilClients * b.o.ceilBatch)
	if perClient < 2 {
		return fmt.Errorf("-n %d is too small for %d clients × %d tasks a transaction: each client needs at least 2 transactions",
			b.o.n, b.o.ceilClients, b.o.ceilBatch)
	}
	pgbench, err := b.pgbenchPath()
	if err != nil {
		return err
	}
	variants, err := ceilingVariants(b.o.ceilVariants)
	if err != nil {
		return err
	}
	for _, v := range variants {
		if _, err := b.o.keyedTenant(); v.keyed && err != nil {
			return err
		}
	}
	var setup string
	if b.o.ceilSetup != "" {
		text, err := os.ReadFile(b.o.ceilSetup)
		if err != nil {
			return fmt.Errorf("-ceiling-setup: %w", err)
		}
		setup = string(text)
	}
	for _, v := range variants {
		if setup != "" {
			v.label += " (with -ceiling-setup)"
			v.window = (*benchdb.DB).TaskWindow
		}
		v.setup = setup
		rate, err := b.ceilingRun(ctx, pgbench, v, perClient)
		if err != nil {
			return fmt.Errorf("ceiling, %s: %w", v.label, err)
		}
		if b.burnRate > 0 {
			b.add("ceiling", "burn-down of this invocation / "+v.label, fmt.Sprintf("%.2f", b.burnRate/rate), "", "")
		}
	}
	return nil
}

// ceilingRun seeds a fresh database and runs one variant's script with
// pgbench; it returns the completed tasks/s.
func (b *bench) ceilingRun(ctx context.Context, pgbench string, v ceilingVariant, perClient int) (float64, error) {
	s, drop, err := b.newDB(ctx, "ceiling")
	if err != nil {
		return 0, err
	}
	defer drop()
	// The engine only enqueues (the burn-down's insert path); it never
	// starts, so nothing but pgbench claims.
	var done atomic.Int64
	wf := noopWorkflow("noop", counting(&done))
	var input func(int) any
	if v.keyed {
		tenant, err := b.o.keyedTenant()
		if err != nil {
			return 0, err
		}
		input = tenantKeyed(&wf, b.o.slots, tenant)
	}
	eng, err := b.newEngine(s, b.o.slots, wf)
	if err != nil {
		return 0, err
	}
	if _, err := b.insert(ctx, s, "ceiling", eng, "noop", b.o.n, 1, input); err != nil {
		return 0, err
	}
	// Before the checkpoint, so that what the file writes is on disk
	// before the measurement too.
	if v.setup != "" {
		if err := runSetup(ctx, s.sql, v.setup); err != nil {
			return 0, fmt.Errorf("-ceiling-setup: %w", err)
		}
	}
	if b.o.ceilCkpt {
		if err := s.q.Checkpoint(ctx); err != nil {
			b.log.Warn("checkpoint before pgbench (needs superuser or pg_checkpoint)", slog.Any("error", err))
		}
	}
	st, err := store.New(s.sql, schema)
	if err != nil {
		return 0, err
	}
	script, err := v.render(st, ceiling.Params{Queue: engine.DefaultQueue, Batch: b.o.ceilBatch, Lease: engine.DefaultLeaseDuration})
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "cairn-ceiling-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(file, []byte(script.Text), 0o600); err != nil {
		return 0, err
	}
	clients := b.o.ceilClients
	args := append([]string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-t", strconv.Itoa(perClient), "-f", file},
		script.Args()...)
	args = append(args, s.url)
	b.log.Info("pgbench", slog.String("variant", v.label), slog.Int("clients", clients), slog.Int("transactions_per_client", perClient),
		slog.Int("batch", b.o.ceilBatch), slog.String("script", file))

	// Every transaction but each client's last completes a batch.
	want := int64(clients) * int64(perClient-1) * int64(b.o.ceilBatch)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, pgbench, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// No progress lines: counting rows meanwhile would load the server
	// being measured.
	endPerf, err := b.perfSpan("ceiling " + v.name)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	meter := startCPU()
	err = cmd.Run()
	share, cpuSecs := meter.stop()
	wall := time.Since(start)
	endPerf(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, lastLines(out.String(), 20))
	}
	b.log.Debug("pgbench output", slog.String("output", out.String()))
	w, err := v.window(s.q, ctx)
	if err != nil {
		return 0, fmt.Errorf("measure: %w", err)
	}
	// A keyed claim may take less than its batch (it skips the keys the
	// other clients' claims hold), so its clients complete at most want.
	if w.Completed > want || (w.Completed < want && !v.keyed) || w.Completed == 0 || w.Seconds() <= 0 {
		return 0, fmt.Errorf("pgbench completed %d tasks, want %d\n%s", w.Completed, want, lastLines(out.String(), 20))
	}
	rate := float64(w.Completed) / w.Seconds()
	b.add("ceiling", fmt.Sprintf("%s: tasks/s, %d clients × %d-task transactions", v.label, clients, b.o.ceilBatch), perSec(rate), "", "")
	b.add("ceiling", v.label+": wall time; machine CPU busy; CPU time per task",
		fmt.Sprintf("%s; %.0f%%; %.0f µs", wall.Round(time.Millisecond), share*100, cpuSecs/float64(w.Completed)*1e6), "", "")
	return rate, nil
}

// runSetup runs the SQL text on one connection of db with Cairn's schema
// first on the search_path. The connection goes back to the pool only
// with the search_path reset; otherwise it is thrown away.
func runSetup(ctx context.Context, db *sql.DB, text string) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	if _, err = conn.ExecContext(ctx, "SET search_path TO "+schema+", public"); err != nil {
		return err
	}
	if _, err = conn.ExecContext(ctx, text); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "RESET search_path")
	return err
}

// pgbenchPath finds pgbench: the private cluster's own, else on PATH or
// under /usr/lib/postgresql/*/bin.
func (b *bench) pgbenchPath() (string, error) {
	if b.cluster != nil {
		return b.cluster.Program("pgbench")
	}
	return pgcluster.FindProgram("pgbench")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
