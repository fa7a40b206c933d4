package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// workerReport is what a worker process prints when it stops.
type workerReport struct {
	Executed int64 `json:"executed"`
}

// scaleout burns down the same number of tasks with 1, 2, 4... worker
// processes (this binary re-executed with -worker) on one database, and
// checks that no task ran twice.
func (b *bench) scaleout(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var counts []int
	for _, f := range strings.Split(b.o.scaleProcs, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("-scale-procs: bad count %q", f)
		}
		counts = append(counts, k)
	}
	for _, k := range counts {
		if err := b.scaleoutOnce(ctx, exe, k); err != nil {
			return fmt.Errorf("%d processes: %w", k, err)
		}
	}
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func (b *bench) scaleoutOnce(ctx context.Context, exe string, k int) error {
	s, drop, err := b.newDB(ctx, fmt.Sprintf("scale%d", k))
	if err != nil {
		return err
	}
	defer drop()
	// An engine that only enqueues.
	enq, err := engine.New(s.sql, engine.Config{NoWorker: true, Logger: b.engineLogger()})
	if err != nil {
		return err
	}
	if err := enq.Register(noopWorkflow("noop", counting(new(atomic.Int64)))); err != nil {
		return err
	}
	n := int64(b.o.scaleN)
	if err := b.enqueueN(ctx, enq, "noop", int(n), nil, nil); err != nil {
		return err
	}

	children := make([]*child, 0, k)
	defer func() {
		for _, c := range children {
			_ = c.stdin.Close()
			_ = c.cmd.Wait()
		}
	}()
	for i := range k {
		cmd := exec.CommandContext(ctx, exe, "-worker", "-worker-db", s.url, "-worker-name", fmt.Sprintf("bench-w%d", i+1),
			"-slots", strconv.Itoa(b.o.slots), "-batch", strconv.Itoa(b.o.batch), "-log-level", b.o.logLevel.String())
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
		children = append(children, c)
	}
	// Every process is set up before any starts claiming.
	for i, c := range children {
		line, err := c.out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return fmt.Errorf("worker %d did not get ready: %q %v", i+1, line, err)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return err
		}
	}
	var completed atomic.Int64
	stop := b.progress(fmt.Sprintf("scale-out %d procs", k), n, completed.Load)
	for completed.Load() < n && ctx.Err() == nil {
		c, err := s.q.CountStatus(ctx, "completed")
		if err != nil {
			stop()
			return err
		}
		completed.Store(c)
		if c < n {
			time.Sleep(250 * time.Millisecond)
		}
	}
	stop()
	if err := ctx.Err(); err != nil {
		return err
	}
	var executed int64
	for i, c := range children {
		_ = c.stdin.Close()
		var rep workerReport
		if err := json.NewDecoder(c.out).Decode(&rep); err != nil {
			return fmt.Errorf("worker %d report: %w", i+1, err)
		}
		executed += rep.Executed
		_ = c.cmd.Wait()
	}
	children = nil
	w, err := s.q.EventWindow(ctx)
	if err != nil {
		return err
	}
	claims, dup, err := s.q.Claims(ctx)
	if err != nil {
		return err
	}
	rate := float64(w.Completed) / w.Seconds()
	b.add("scaleout", fmt.Sprintf("%d process(es) × %d slots, %d tasks", k, b.o.slots, n), perSec(rate), "", "")
	b.check("scaleout", fmt.Sprintf("%d process(es): duplicate executions", k),
		fmt.Sprintf("%d handler runs, %d claims, %d tasks claimed twice", executed, claims, dup), "0 (runs = claims = tasks)",
		dup == 0 && executed == n && claims == n)
	return nil
}

// workerMain is the -worker mode: an engine with the no-op workflow that
// says "ready", starts on "go", and stops and reports when stdin closes.
func workerMain(o options) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: max(o.logLevel, slog.LevelWarn)})).
		With(slog.String("worker", o.workerName))
	ctx := context.Background()
	db, err := openPool(ctx, o.workerDB)
	if err != nil {
		logger.Error("open database", slog.Any("error", err))
		return 1
	}
	defer db.Close()
	var executed atomic.Int64
	eng, err := engine.New(db, engine.Config{
		DatabaseURL:     o.workerDB,
		Queues:          map[string]engine.QueueConfig{engine.DefaultQueue: {Slots: o.slots}},
		CompletionBatch: o.batch,
		WorkerName:      o.workerName,
		Logger:          logger,
		Retention:       -1,
	})
	if err == nil {
		err = eng.Register(noopWorkflow("noop", counting(&executed)))
	}
	if err != nil {
		logger.Error("engine", slog.Any("error", err))
		return 1
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return 1
	}
	if err := eng.Start(ctx); err != nil {
		logger.Error("start", slog.Any("error", err))
		return 1
	}
	_, _ = io.Copy(io.Discard, in)
	shutdown(eng)
	_ = json.NewEncoder(os.Stdout).Encode(workerReport{Executed: executed.Load()})
	return 0
}
