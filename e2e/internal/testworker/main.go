// Command testworker is a Cairn worker process for the e2e durability
// tests. It embeds the engine with the timings given by its flags,
// registers test workflows whose handlers are driven by the run input, and
// records every execution as a marker file, so that a test can count the
// executions of each task and spot duplicates after killing processes.
//
// As a worker it prints "READY worker=<id>" once started, and on SIGTERM
// or SIGINT it calls Shutdown (which honours -grace), prints "STOPPED" and
// exits 0. With -enqueue it enqueues -n runs of that workflow with -input,
// prints "RUN <id>" for each and exits; -after makes them wait for those
// runs (engine.WithAfter), under -after-rule (a shorthand) when given.
//
// Workflows (both "work" then "after"; "after" is always quick):
//
//	requeue  tasks have RequeueOnInterrupt
//	park     tasks do not (they are parked as interrupted)
//
// Run input of the "work" task:
//
//	{"mode": "quick" | "sleep" | "block" | "defer" | "checkpoint",
//	 "dir": marker and gate directory (required),
//	 "sleep_ms": how long mode sleep works (default 10),
//	 "every_ms": DeferUntil interval (default 100),
//	 "trace_cond": record every evaluation of the deferral condition,
//	 "token": what mode checkpoint saves}
//
// Durable waits (tasks of the park workflow go back to ready all the same
// when interrupted while waiting):
//
//	steps    journals step "one", sleeps sleep_ms durably, then journals
//	         steps "two" and "three"
//	signals  awaits signal "a", journals step "got-a", awaits signal "b",
//	         journals step "got-b"; outputs {"a": payload, "b": payload}
//	fanout   spawns "children" child runs of its own workflow (mode sleep,
//	         sleep_ms), one SpawnRun each, named c0, c1, ...; before child
//	         "pause_at" (when > 0) it waits for the gate file
//	         <dir>/gate-spawn; then awaits them all and outputs
//	         {"children": n, "completed": how many completed}
//
// Each of their steps' functions inserts one row into the table
// <schema>.e2e_side_effects (run_id, task_id, step, attempt, pid, detail),
// which the test creates: a step run twice shows as two rows.
//
// Mode fail waits for a gate file like block, then fails permanently.
//
// sleep stands for a short piece of work (it returns early when the context
// ends); block waits until a gate file exists (or the context ends); defer parks
// with DeferUntil until a gate file exists; checkpoint saves {"token"} on
// its first attempt and then defers like defer. The gate files are
// <dir>/gate-all and <dir>/gate-run-<run id>.
//
// Markers are JSON files <dir>/<kind>-<task>-<attempt>-<pid>-<seq>.json
// written atomically (temp file + rename). Kinds: "start" when a handler
// begins (with the checkpoint it loaded), "done" just before it returns
// nil, "cond" for each traced condition evaluation.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// Input is the run input the handlers read.
type Input struct {
	Mode      string `json:"mode"`
	Dir       string `json:"dir"`
	SleepMs   int64  `json:"sleep_ms"`
	EveryMs   int64  `json:"every_ms"`
	TraceCond bool   `json:"trace_cond"`
	Token     string `json:"token"`
	Children  int    `json:"children"`
	PauseAt   int    `json:"pause_at"`
}

// Record is one marker file.
type Record struct {
	Kind       string          `json:"kind"`
	TaskID     int64           `json:"task_id"`
	RunID      int64           `json:"run_id"`
	Task       string          `json:"task"`
	Attempt    int             `json:"attempt"`
	PID        int             `json:"pid"`
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
	At         time.Time       `json:"at"`
}

type options struct {
	dbURL     string
	schema    string
	name      string
	slots     int
	lease     time.Duration
	heartbeat time.Duration
	rescue    time.Duration
	grace     time.Duration
	poll      time.Duration
	workflows string
	enqueue   string
	n         int
	input     string
	after     string
	afterRule string
}

func main() {
	var o options
	flag.StringVar(&o.dbURL, "db", os.Getenv("DATABASE_URL"), "database URL (default $DATABASE_URL)")
	flag.StringVar(&o.schema, "schema", engine.DefaultSchema, "Cairn schema")
	flag.StringVar(&o.name, "name", "", "worker name (default host:pid)")
	flag.IntVar(&o.slots, "slots", 4, "slots on the default queue")
	flag.DurationVar(&o.lease, "lease", 2*time.Second, "task lease")
	flag.DurationVar(&o.heartbeat, "heartbeat", 300*time.Millisecond, "heartbeat interval")
	flag.DurationVar(&o.rescue, "rescue", 300*time.Millisecond, "rescuer interval")
	flag.DurationVar(&o.grace, "grace", 3*time.Second, "shutdown grace period")
	flag.DurationVar(&o.poll, "poll", 200*time.Millisecond, "claim poll interval")
	flag.StringVar(&o.workflows, "workflows", "requeue,park,single", "comma-separated workflows to register")
	flag.StringVar(&o.enqueue, "enqueue", "", "enqueue runs of this workflow and exit")
	flag.IntVar(&o.n, "n", 1, "with -enqueue: how many runs")
	flag.StringVar(&o.input, "input", "{}", "with -enqueue: run input (JSON object)")
	flag.StringVar(&o.after, "after", "", "with -enqueue: comma-separated run ids the runs wait for (WithAfter)")
	flag.StringVar(&o.afterRule, "after-rule", "", "with -after: trigger rule shorthand (all_success, all_done, one_failed, none_failed)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.dbURL == "" {
		return errors.New("no database: set -db or DATABASE_URL")
	}
	db, err := store.Open(context.Background(), o.dbURL, 10*time.Second)
	if err != nil {
		return err
	}
	defer db.Close()
	sideDB, sideSchema = db, o.schema
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	eng, err := engine.New(db, engine.Config{
		Schema:            o.schema,
		DatabaseURL:       o.dbURL,
		Queues:            map[string]engine.QueueConfig{engine.DefaultQueue: {Slots: o.slots}},
		NoWorker:          o.enqueue != "",
		Logger:            logger,
		WorkerName:        o.name,
		PollInterval:      o.poll,
		HeartbeatInterval: o.heartbeat,
		LeaseDuration:     o.lease,
		RescueInterval:    o.rescue,
		ShutdownGrace:     o.grace,
	})
	if err != nil {
		return err
	}
	for _, name := range strings.Split(o.workflows, ",") {
		wf, err := workflow(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		if err := eng.Register(wf); err != nil {
			return err
		}
	}
	ctx := context.Background()
	if o.enqueue != "" {
		opts, err := afterOptions(o)
		if err != nil {
			return err
		}
		for left := o.n; left > 0; {
			batch := make([]engine.EnqueueParams, min(left, 500))
			for i := range batch {
				batch[i] = engine.EnqueueParams{Workflow: o.enqueue, Input: json.RawMessage(o.input), Options: opts}
			}
			runs, err := eng.EnqueueMany(ctx, batch)
			if err != nil {
				return err
			}
			for _, r := range runs {
				fmt.Printf("RUN %d\n", r.ID)
			}
			left -= len(batch)
		}
		return nil
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := eng.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("READY worker=%d\n", eng.WorkerID())
	sig := <-sigs
	fmt.Printf("STOPPING signal=%s\n", sig)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "testworker: second signal: exiting at once")
		os.Exit(2)
	}()
	// Shutdown applies the grace period itself; the deadline here only
	// bounds a shutdown that hangs.
	sctx, cancel := context.WithTimeout(ctx, o.grace+30*time.Second)
	defer cancel()
	if err := eng.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Println("STOPPED")
	return nil
}

// afterOptions turns -after and -after-rule into enqueue options.
func afterOptions(o options) ([]engine.EnqueueOption, error) {
	if o.after == "" {
		if o.afterRule != "" {
			return nil, errors.New("-after-rule needs -after")
		}
		return nil, nil
	}
	var ids []int64
	for _, f := range strings.Split(o.after, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-after: %q is not a run id", f)
		}
		ids = append(ids, id)
	}
	opts := []engine.EnqueueOption{engine.WithAfter(ids...)}
	if o.afterRule != "" {
		opts = append(opts, engine.WithAfterRule(engine.TriggerRule{Shorthand: o.afterRule}))
	}
	return opts, nil
}

// workflow returns the test workflow called name.
func workflow(name string) (engine.Workflow, error) {
	requeue := false
	retry := engine.RetryPolicy{MaxAttempts: 3, InitialDelay: 100 * time.Millisecond, NoJitter: true}
	switch name {
	case "requeue":
		requeue = true
	case "park":
	case "single":
		// One task: a run whose row no transition writes (see migration
		// 019), read exactly only through the view runs.
		return engine.Workflow{Name: name, Tasks: []engine.Task{
			{Name: "work", Run: work, RequeueOnInterrupt: true, Retry: retry},
		}}, nil
	case "deploy-v1", "deploy-v2":
		// Two versions of workflow deploy, for a rolling deploy: v1 is
		// work -> after, v2 adds check after them.
		wf := engine.Workflow{Name: "deploy", Version: strings.TrimPrefix(name, "deploy-"), Tasks: []engine.Task{
			{Name: "work", Run: work, Retry: retry},
			{Name: "after", Deps: []string{"work"}, Run: after, Retry: retry},
		}}
		if wf.Version == "v2" {
			wf.Tasks = append(wf.Tasks, engine.Task{Name: "check", Deps: []string{"after"}, Run: after, Retry: retry})
		}
		return wf, nil
	default:
		return engine.Workflow{}, fmt.Errorf("unknown workflow %q (want requeue, park, single, deploy-v1 or deploy-v2)", name)
	}
	return engine.Workflow{Name: name, Tasks: []engine.Task{
		{Name: "work", Run: work, RequeueOnInterrupt: requeue, Retry: retry},
		{Name: "after", Deps: []string{"work"}, Run: after, RequeueOnInterrupt: requeue, Retry: retry},
	}}, nil
}

func work(ctx context.Context, t *engine.TaskHandle) error {
	var in Input
	if err := t.RunInput(&in); err != nil {
		return engine.Permanent(err)
	}
	if in.Dir == "" {
		return engine.Permanent(errors.New(`run input needs "dir"`))
	}
	var cp json.RawMessage
	if _, err := t.LoadCheckpoint(&cp); err != nil {
		return err
	}
	if err := record(in.Dir, "start", t, cp); err != nil {
		return err
	}
	open := func(context.Context) bool {
		if in.TraceCond {
			_ = record(in.Dir, "cond", t, nil)
		}
		return gateOpen(in.Dir, t.RunID())
	}
	every := time.Duration(max(in.EveryMs, 100)) * time.Millisecond
	switch in.Mode {
	case "", "quick":
	case "sleep":
		work := time.NewTimer(time.Duration(cmp.Or(in.SleepMs, 10)) * time.Millisecond)
		defer work.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-work.C:
		}
	case "block", "fail":
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !gateOpen(in.Dir, t.RunID()) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		if in.Mode == "fail" {
			return engine.Permanent(errors.New("mode fail"))
		}
	case "checkpoint":
		if len(cp) == 0 {
			if err := t.Checkpoint(map[string]any{"token": in.Token, "saved_by_attempt": t.Attempt()}); err != nil {
				return err
			}
		}
		fallthrough
	case "defer":
		if err := t.DeferUntil(ctx, open, every); err != nil {
			return err
		}
	case "steps":
		if _, err := engine.Step(ctx, t, "one", sideEffect(t, "one", "")); err != nil {
			return err
		}
		if err := t.Sleep(ctx, time.Duration(cmp.Or(in.SleepMs, 10))*time.Millisecond); err != nil {
			return err
		}
		for _, name := range []string{"two", "three"} {
			if _, err := engine.Step(ctx, t, name, sideEffect(t, name, "")); err != nil {
				return err
			}
		}
	case "signals":
		got := map[string]json.RawMessage{}
		for _, name := range []string{"a", "b"} {
			p, err := t.AwaitSignal(ctx, name, 0)
			if err != nil {
				return err
			}
			if _, err := engine.Step(ctx, t, "got-"+name, sideEffect(t, "got-"+name, string(p))); err != nil {
				return err
			}
			got[name] = p
		}
		if err := t.SetOutput(got); err != nil {
			return err
		}
		return record(in.Dir, "done", t, nil)
	case "fanout":
		return fanout(ctx, t, in)
	default:
		return engine.Permanent(fmt.Errorf("unknown mode %q", in.Mode))
	}
	if err := t.SetOutput(map[string]any{"pid": os.Getpid(), "attempt": t.Attempt()}); err != nil {
		return err
	}
	return record(in.Dir, "done", t, nil)
}

// fanout is the work of mode fanout.
func fanout(ctx context.Context, t *engine.TaskHandle, in Input) error {
	ids := make([]int64, in.Children)
	for i := range ids {
		if in.PauseAt > 0 && i == in.PauseAt {
			tick := time.NewTicker(20 * time.Millisecond)
			for _, err := os.Stat(filepath.Join(in.Dir, "gate-spawn")); err != nil; _, err = os.Stat(filepath.Join(in.Dir, "gate-spawn")) {
				select {
				case <-ctx.Done():
					tick.Stop()
					return ctx.Err()
				case <-tick.C:
				}
			}
			tick.Stop()
		}
		r, err := t.SpawnRun(ctx, fmt.Sprintf("c%d", i), t.Workflow(), Input{Mode: "sleep", Dir: in.Dir, SleepMs: cmp.Or(in.SleepMs, 10)})
		if err != nil {
			return err
		}
		ids[i] = r.ID
	}
	out, err := t.AwaitRuns(ctx, ids...)
	if err != nil {
		return err
	}
	completed := 0
	for _, r := range out {
		if r.Status == store.RunCompleted {
			completed++
		}
	}
	if err := t.SetOutput(map[string]int{"children": len(out), "completed": completed}); err != nil {
		return err
	}
	return record(in.Dir, "done", t, nil)
}

func after(ctx context.Context, t *engine.TaskHandle) error {
	var in Input
	if err := t.RunInput(&in); err != nil {
		return engine.Permanent(err)
	}
	if err := record(in.Dir, "start", t, nil); err != nil {
		return err
	}
	return record(in.Dir, "done", t, nil)
}

// sideDB and sideSchema are where step functions record their side
// effects.
var (
	sideDB     *sql.DB
	sideSchema string
)

// sideEffect is a step function that inserts one row into
// e2e_side_effects and returns its id.
func sideEffect(t *engine.TaskHandle, step, detail string) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		var id int64
		err := sideDB.QueryRowContext(ctx, fmt.Sprintf(`INSERT INTO %s.e2e_side_effects (run_id, task_id, step, attempt, pid, detail)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, sideSchema), t.RunID(), t.TaskID(), step, t.Attempt(), os.Getpid(), detail).Scan(&id)
		if err != nil {
			return 0, fmt.Errorf("record side effect of step %s: %w", step, err)
		}
		return id, nil
	}
}

func gateOpen(dir string, runID int64) bool {
	for _, name := range []string{"gate-all", fmt.Sprintf("gate-run-%d", runID)} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

var seq atomic.Int64

// record writes one marker file atomically.
func record(dir, kind string, t *engine.TaskHandle, cp json.RawMessage) error {
	r := Record{Kind: kind, TaskID: t.TaskID(), RunID: t.RunID(), Task: t.Name(), Attempt: t.Attempt(),
		PID: os.Getpid(), Checkpoint: cp, At: time.Now()}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d-%d-%d-%d.json", kind, r.TaskID, r.Attempt, r.PID, seq.Add(1))
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	return nil
}
