package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// workflowName is the one-task workflow every scenario runs.
const workflowName = "chaos"

// workerEnv, set to 1 in a worker's environment, makes the program (the
// command or its test binary) run as a worker.
const workerEnv = "CAIRN_CHAOS_WORKER"

// workerOptions are a worker process's flags.
type workerOptions struct {
	db        string
	name      string
	slots     int
	work      time.Duration
	lease     time.Duration
	heartbeat time.Duration
	rescue    time.Duration
}

// args are the flags that start a worker with o.
func (o workerOptions) args() []string {
	return []string{"worker", "-db", o.db, "-name", o.name, "-slots", fmt.Sprint(o.slots),
		"-work", o.work.String(), "-lease", o.lease.String(), "-heartbeat", o.heartbeat.String(), "-rescue", o.rescue.String()}
}

// workerMain runs a worker process: an engine with the chaos workflow
// whose handler records each execution (task, attempt, worker, pid) in
// chaos.executions, committed before the work starts. It prints READY
// once started and stops gracefully on SIGTERM or SIGINT.
func workerMain(args []string) int {
	var o workerOptions
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	fs.StringVar(&o.db, "db", "", "database URL")
	fs.StringVar(&o.name, "name", "", "worker name")
	fs.IntVar(&o.slots, "slots", 4, "slots")
	fs.DurationVar(&o.work, "work", 10*time.Millisecond, "how long a task works")
	fs.DurationVar(&o.lease, "lease", 2*time.Second, "task lease")
	fs.DurationVar(&o.heartbeat, "heartbeat", 300*time.Millisecond, "heartbeat interval")
	fs.DurationVar(&o.rescue, "rescue", 300*time.Millisecond, "rescuer interval")
	_ = fs.Parse(args)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("worker", o.name))
	if err := runWorker(o, logger); err != nil {
		logger.Error("worker failed", slog.Any("error", err))
		return 1
	}
	return 0
}

func runWorker(o workerOptions, logger *slog.Logger) error {
	ctx := context.Background()
	db, err := store.Open(ctx, o.db, 30*time.Second)
	if err != nil {
		return err
	}
	defer db.Close()
	eng, err := engine.New(db, engine.Config{
		DatabaseURL:       o.db,
		Queues:            map[string]engine.QueueConfig{engine.DefaultQueue: {Slots: o.slots}},
		Logger:            logger,
		WorkerName:        o.name,
		PollInterval:      200 * time.Millisecond,
		HeartbeatInterval: o.heartbeat,
		LeaseDuration:     o.lease,
		RescueInterval:    o.rescue,
		ShutdownGrace:     5 * time.Second,
		Retention:         -1,
	})
	if err != nil {
		return err
	}
	if err := eng.Register(chaosWorkflow(recorder(db, o))); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := eng.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("READY worker=%d\n", eng.WorkerID())
	<-sigs
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := eng.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Println("STOPPED")
	return nil
}

// chaosWorkflow is the workflow of every scenario: one task, requeued when
// interrupted, with attempts and rescues enough to outlast every fault.
func chaosWorkflow(run engine.Handler) engine.Workflow {
	return engine.Workflow{Name: workflowName, Tasks: []engine.Task{{
		Name: "work", Run: run, RequeueOnInterrupt: true, MaxRescues: 1000,
		Retry: engine.RetryPolicy{MaxAttempts: 1000, InitialDelay: 50 * time.Millisecond, MaxDelay: time.Second},
	}}}
}

// recorder is the handler: it commits a row saying this attempt ran here,
// then works for o.work.
func recorder(db *sql.DB, o workerOptions) engine.Handler {
	pid := os.Getpid()
	var calls atomic.Int64
	return func(ctx context.Context, t *engine.TaskHandle) error {
		if _, err := db.ExecContext(ctx, sqlRecordExecution, t.TaskID(), t.Attempt(), o.name, pid, calls.Add(1)); err != nil {
			return fmt.Errorf("record execution: %w", err)
		}
		work := time.NewTimer(o.work)
		defer work.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-work.C:
			return nil
		}
	}
}
