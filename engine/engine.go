// Package engine is Cairn's embeddable API: register workflows, enqueue
// runs, start workers and shut them down. Every state change is written
// through the store in one transaction; several engines in several
// processes share one database safely.
package engine

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/cron"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/engine/internal/lifecycle"
	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/engine/internal/notify"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/engine/internal/routing"
	"github.com/cairnhq/cairn/engine/internal/tasklog"
	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/engine/internal/timers"
	"github.com/cairnhq/cairn/store"
)

// errShutdownCancel is the cause given to handler contexts cancelled at
// the end of the shutdown grace period.
var errShutdownCancel = errors.New("cancelled by shutdown")

// errTimeout is the cause given to handler contexts past their timeout.
var errTimeout = errors.New("task timeout")

// Engine runs workflows. Create it with New, Register workflows, Start it,
// and Shutdown when done.
type Engine struct {
	cfg Config
	st  *store.Store

	registry                 // the registered workflows (see workflow.go)
	router   *routing.Router // the worker row's handles (see routing.go)
	worker                   // this process's worker: queues, executions, writers (see worker.go)

	life     *lifecycle.Life  // one start, one stop
	services lifecycle.Groups // started and stopped in groups (see Start, Shutdown)

	// hub hears the database's notifications and hands them to the
	// subscribers (events, log notes), WaitRun calls and the queues.
	hub       *notify.Hub
	waker     *notify.Waker // announces the ready queues of concurrent enqueues after their commit
	scheduler *cron.Scheduler
	health    *backoff.Health // database errors of the loops: backoff wake-ups and log lines
	tr        tracer          // OpenTelemetry spans (see tracing.go); zero: off
}

// New returns an engine over db, a database/sql pool of the lib/pq driver.
// It validates cfg and returns an error naming the first bad field.
//
// The engine uses db from a dozen or more goroutines at once; a pool that
// keeps only database/sql's default of 2 idle connections reconnects at
// nearly every use under load. Open the pool with store.Open, or call
// store.ConfigurePool on it (or SetMaxIdleConns(32) or more).
func New(db *sql.DB, cfg Config) (*Engine, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(db, cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %v", ErrInvalidConfig, err)
	}
	e := &Engine{cfg: cfg, st: st, registry: registry{workflows: map[string]*workflowDef{}}, life: lifecycle.New(),
		worker: worker{wakeups: timers.NewWakeups(cfg.Clock), executor: newExecutor(cfg.Clock)},
		health: backoff.NewHealth(cfg.Logger, cfg.Clock), tr: newTracer(cfg.TracerProvider, cfg.Clock)}
	e.router = routing.New(routing.Config{Store: st, Name: cfg.WorkerName, Queues: cfg.slotsByQueue(), Registered: e.registered,
		Changed: e.wakeAll, Lease: cfg.LeaseDuration, Logger: cfg.Logger})
	e.hub = e.newHub()
	e.waker = notify.NewWaker(e.st, e.health)
	return e, nil
}

// Register adds a workflow. It rejects cycles (naming them), unknown
// dependencies, duplicate or empty names, and a second registration of the
// same name with a different shape; registering the same shape again is a
// no-op.
//
// Its definition is stored with its version (Workflow.Version) in
// workflow_versions; the worker claims only tasks of registered workflows
// (routing), of versions it serves, so a workflow may be registered after
// Start: its tasks are claimed from then on. The writes are at once (or at
// Start); a failed one is logged and retried at each heartbeat.
func (e *Engine) Register(wf Workflow) error {
	def, err := compile(wf)
	if err != nil {
		return err
	}
	if def.stored, err = rules.Version(wf.Name, wf.Version, wf.Compatible, e.describe(def), def.templates); err != nil {
		return err
	}
	e.wfMu.Lock()
	if old, ok := e.workflows[wf.Name]; ok {
		defer e.wfMu.Unlock()
		if old.shape != def.shape {
			return fmt.Errorf("%w %q: registered twice with different shapes", ErrInvalidWorkflow, wf.Name)
		}
		old.wf = wf // same shape: take the new handlers
		return nil
	}
	e.workflows[wf.Name] = def
	if def.keyed {
		e.keyed.Store(true)
	}
	e.wfMu.Unlock()
	e.router.Sync()
	return nil
}

// Workflows returns the names of the registered workflows, sorted.
func (e *Engine) Workflows() []string {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	return slices.Sorted(maps.Keys(e.workflows))
}

func (e *Engine) workflow(name string) (*workflowDef, bool) {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	d, ok := e.workflows[name]
	return d, ok
}

// WorkerID returns this engine's worker id (0 before Start or with NoWorker).
func (e *Engine) WorkerID() int64 { return e.workerID.Load() }

// Start registers the worker, starts claiming from the configured queues
// and the background services (heartbeat, rescuer, scheduler, pruner), and
// returns at once. Cancelling ctx later shuts the engine down as Shutdown
// does.
func (e *Engine) Start(ctx context.Context) error {
	return e.life.Start(ctx, func(loops context.Context) error { return e.start(ctx, loops) },
		func() { _ = e.Shutdown(context.Background()) })
}

// start is Start's work, under the life's lock; loops is the context of
// the engine's loops, which ends at Shutdown.
func (e *Engine) start(ctx, loops context.Context) error {
	if err := e.st.CheckMigrated(ctx); err != nil {
		return err
	}
	names := slices.Collect(maps.Keys(e.cfg.Queues))
	e.wfMu.RLock()
	for _, d := range e.workflows {
		names = append(names, d.queues...)
	}
	e.wfMu.RUnlock()
	if err := e.st.QueueEnsure(ctx, names); err != nil {
		return err
	}
	for name, q := range e.cfg.Queues {
		if q.MaxRunning > 0 {
			if err := e.st.QueueSetCap(ctx, name, &q.MaxRunning); err != nil {
				return err
			}
		}
	}
	if err := e.upsertSchedules(ctx); err != nil {
		return err
	}

	e.running.Open(context.WithoutCancel(ctx), e.execute)
	e.queues = producer.Queues[*execution]{}
	if e.cfg.NoWorker {
		if err := e.router.Open(ctx, loops); err != nil {
			return err
		}
	} else {
		for name, q := range e.cfg.Queues {
			e.queues[name] = producer.NewQueue[*execution](name, q.Slots)
		}
		id, err := e.router.Register(ctx, loops)
		if err != nil {
			return err
		}
		e.workerID.Store(id)
	}
	if e.cfg.DatabaseURL != "" {
		if err := e.hub.Listen(ctx, e.cfg.DatabaseURL, e.cfg.WorkerName+"/"+rand.Text()[:10]); err != nil {
			return err
		}
		e.services.Background = append(e.services.Background, e.hub)
	} else {
		e.cfg.Logger.InfoContext(ctx, "no DatabaseURL: workers poll instead of listening", slog.Duration("poll_interval", e.cfg.PollInterval))
	}
	if !e.cfg.NoWorker {
		e.completer = newCompleter(e)
		e.parker = newParker(e)
		e.steps = journal.NewWriter(journal.WriterConfig{Store: e.st, Max: e.cfg.CompletionBatch, Clock: e.cfg.Clock,
			Health: e.health, More: func(n int) bool { return e.queues.Held() > n }})
		e.services.Writers = []lifecycle.Service{e.steps, e.parker, e.completer}
		for _, q := range e.queues {
			e.services.Producers = append(e.services.Producers, e.newProducer(q))
		}
		e.taskLogs = tasklog.New(tasklog.Config{Store: e.st, Logger: e.cfg.Logger, Health: e.health})
		e.services.Background = append(e.services.Background, e.newHeartbeat(), e.taskLogs)
	}
	e.services.Background = append(e.services.Background, maint.Upkeep(maint.UpkeepConfig{Store: e.st,
		Lease: e.cfg.LeaseDuration, RescueInterval: e.cfg.RescueInterval, Retention: e.cfg.Retention,
		NoHorizonWatch: e.cfg.NoHorizonWatch, Clock: e.cfg.Clock, Logger: e.cfg.Logger, Health: e.health,
		OnMoves: telemetry.CountMoves, OnHorizon: telemetry.ObserveHorizon})...)
	e.scheduler = newScheduler(e)
	e.services.Background = append(e.services.Background, e.scheduler)
	if err := e.services.Start(loops); err != nil {
		return err
	}
	e.cfg.Logger.InfoContext(ctx, "engine started", slog.Int64("worker", e.workerID.Load()), slog.String("schema", e.cfg.Schema),
		slog.Int("queues", len(e.queues)))
	return nil
}

func (cfg Config) slotsByQueue() map[string]int {
	out := map[string]int{}
	for name, q := range cfg.Queues {
		out[name] = q.Slots
	}
	return out
}

// Shutdown stops claiming, lets running handlers finish within
// Config.ShutdownGrace (or until ctx is done, whichever comes first), then
// cancels the rest and applies the interrupt rule to each: tasks with
// RequeueOnInterrupt go back to ready, others are parked as interrupted.
// Tasks parked in a durable wait (Sleep, AwaitSignal) are cancelled at
// once and go back to ready whatever RequeueOnInterrupt says.
// The worker row is marked stopped. Safe to call twice or before Start.
func (e *Engine) Shutdown(ctx context.Context) error {
	if mine, err := e.life.BeginStop(ctx); !mine {
		return err
	}
	defer e.life.EndStop()
	bg := context.WithoutCancel(ctx)
	e.router.Stop()
	id := e.workerID.Load()
	if id != 0 {
		_ = e.st.WorkerSetStatus(bg, id, "stopping")
	}
	// 1. Stop claiming, and wait for claims in flight: their tasks must
	// be started (and so waited for) before the handlers are counted.
	lifecycle.StopTogether(e.services.Producers)
	// 2. The handlers: parked ones are interrupted at once, running ones
	// get the grace; the writers keep running meanwhile.
	e.running.Drain(ctx, executor.DrainConfig{Grace: e.cfg.ShutdownGrace, Hard: 5 * time.Second,
		ProgressEvery: shutdownProgressEvery, Cause: errShutdownCancel, Clock: e.cfg.Clock, Logger: e.cfg.Logger,
		Interrupt: e.interruptStragglers})
	e.life.CancelLoops()
	// 3. The background services in turn (the heartbeat renewed leases
	// while handlers finished), and the rows they hold.
	lifecycle.StopInTurn(e.services.Background)
	if err := e.hub.Release(bg); err != nil {
		e.cfg.Logger.WarnContext(bg, "drop event listener row", slog.Any("error", err))
	}
	if e.scheduler != nil {
		if err := e.scheduler.Release(bg); err != nil {
			e.cfg.Logger.WarnContext(bg, "release scheduler lease", slog.Any("error", err))
		}
	}
	// 4. Last, once every handler returned: the writers of finished and
	// parked attempts.
	lifecycle.StopInTurn(e.services.Writers)
	e.wakeups.Stop()
	e.waker.Close()
	e.hub.Close()
	if id != 0 {
		if err := e.st.WorkerSetStatus(bg, id, "stopped"); err != nil {
			e.cfg.Logger.WarnContext(bg, "mark worker stopped", slog.Any("error", err))
		}
	}
	e.cfg.Logger.InfoContext(bg, "engine stopped", slog.Int64("worker", id))
	return nil
}

// shutdownProgressEvery is how often Shutdown says what it waits for.
const shutdownProgressEvery = 5 * time.Second

// interruptStragglers writes the interrupt rule for the tasks of
// handlers that did not return after being cancelled at shutdown.
func (e *Engine) interruptStragglers(ctx context.Context, items []store.TransitionItem) {
	moved, released, err := e.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred},
		WorkerID: e.workerID.Load(), Items: items})
	if err != nil {
		e.cfg.Logger.ErrorContext(ctx, "interrupt stragglers", slog.Any("error", err))
	}
	telemetry.CountMoves(moved, released)
}

// onReconnect runs when the LISTEN connection is back after a drop:
// notifications may have been missed, so the claim loops look for work,
// and loops waiting out a backoff on the database retry now.
func (e *Engine) onReconnect() {
	e.health.Nudge()
	e.wakeAll() // then the hub wakes every WaitRun: a run may have ended while the listener was away
}

// wakeAll makes every claim loop look for work now.
func (e *Engine) wakeAll() {
	for _, q := range e.queues {
		q.Poke()
	}
}
