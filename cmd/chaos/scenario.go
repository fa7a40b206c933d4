package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
)

// Timings of every worker: a dead or cut-off worker's tasks are rescued
// within about lease + rescue.
const (
	lease     = 2 * time.Second
	heartbeat = 300 * time.Millisecond
	rescue    = 300 * time.Millisecond
)

// phases are a scenario's timings.
type phases struct {
	baseline, fault, recovery, drain time.Duration
}

func (o options) phases() phases {
	if o.short {
		return phases{baseline: 2 * time.Second, fault: 3 * time.Second, recovery: 3 * time.Second, drain: 90 * time.Second}
	}
	return phases{baseline: 10 * time.Second, fault: 10 * time.Second, recovery: 10 * time.Second, drain: 3 * time.Minute}
}

// scenario is one fault. inject runs it for about window and returns
// once the fault is over.
type scenario struct {
	name string
	// ownCluster: the scenario stops the server, so it gets a cluster of
	// its own.
	ownCluster bool
	inject     func(ctx context.Context, e *env, window time.Duration) error
}

var scenarios = []scenario{
	{name: "crash", ownCluster: true, inject: injectCrash},
	{name: "backend-kill", inject: injectBackendKills},
	{name: "pool-exhaustion", inject: injectPoolExhaustion},
	{name: "sigkill", inject: injectSigkill},
	{name: "repeated-kill", inject: injectRepeatedKills},
	{name: "lost-ack", inject: injectLostAcks},
	{name: "partition", inject: injectPartition},
}

// env is one scenario's database, workers and load.
type env struct {
	o       options
	log     *slog.Logger
	srv     *server
	url     string // the scenario's database, direct
	target  string // host:port the proxies forward to
	ctrl    *sql.DB
	eng     *engine.Engine // enqueues; never claims
	logDir  string
	workers []*worker
	seq     int
	note    []string
	// cameBack is the worker that was cut off and when it came back.
	cameBack *worker
	backAt   time.Time

	mu      sync.Mutex
	samples []sample
}

type sample struct {
	at        time.Time
	completed int64
}

// worker is one worker process behind its proxy.
type worker struct {
	name   string
	proxy  *proxy
	cmd    *exec.Cmd
	exited chan struct{}
}

func (e *env) notef(format string, args ...any) {
	e.note = append(e.note, fmt.Sprintf(format, args...))
	e.log.Info("fault", slog.String("detail", e.note[len(e.note)-1]))
}

func runScenario(ctx context.Context, o options, logger *slog.Logger, shared *server, sc scenario) (result, error) {
	res := result{scenario: sc.name}
	srv := shared
	if sc.ownCluster {
		own, err := startCluster(ctx, logger)
		if err != nil {
			return res, err
		}
		defer own.close()
		srv = own
	}
	name := fmt.Sprintf("cairn_chaos_%s_%d", strings.ReplaceAll(sc.name, "-", "_"), os.Getpid())
	dbURL, err := srv.srv.CreateDatabase(ctx, name)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := srv.srv.DropDatabase(context.Background(), name); err != nil {
			logger.Warn("drop database", slog.String("db", name), slog.Any("error", err))
		}
	}()
	u, _ := url.Parse(dbURL)
	logDir, err := os.MkdirTemp("", "cairn-chaos-"+sc.name+"-")
	if err != nil {
		return res, err
	}
	e := &env{o: o, log: logger.With(slog.String("scenario", sc.name)), srv: srv, url: dbURL, target: u.Host, logDir: logDir}
	defer e.close()
	if err := e.setup(ctx); err != nil {
		return res, err
	}
	p := o.phases()
	window := p.fault
	if sc.name == "partition" {
		window = max(window, lease+3*time.Second)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }() // before e.close, on every return
	wg.Add(2)
	go func() { defer wg.Done(); e.offer(loadCtx) }()
	go func() { defer wg.Done(); e.sample(loadCtx) }()

	t0 := time.Now()
	if err := sleep(ctx, p.baseline); err != nil {
		return res, err
	}
	tFault := time.Now()
	if err := sc.inject(ctx, e, window); err != nil {
		return res, fmt.Errorf("inject %s: %w", sc.name, err)
	}
	tHealed := time.Now()
	if err := sleep(ctx, p.recovery); err != nil {
		return res, err
	}
	tEnd := time.Now()
	stopLoad()
	wg.Wait()

	drained := e.drain(ctx, p.drain)
	if err := e.stopWorkers(); err != nil {
		e.notef("stop workers: %v", err)
	}
	if err := e.verify(ctx, &res); err != nil {
		return res, err
	}
	if !drained {
		e.notef("not drained within %s", p.drain)
	}
	if w := e.cameBack; w != nil {
		var n int64
		if err := e.ctrl.QueryRowContext(ctx, sqlCountExecutionsSince, w.name, e.backAt).Scan(&n); err != nil {
			return res, err
		}
		e.notef("%s executed %d tasks after it came back", w.name, n)
	}
	e.rates(&res, t0, tFault, tHealed, tEnd)
	res.notes = e.note
	if !res.ok() {
		e.log.Error("worker logs kept", slog.String("dir", logDir))
	} else {
		os.RemoveAll(logDir)
	}
	return res, nil
}

// setup migrates the database, creates the executions table and starts
// the workers.
func (e *env) setup(ctx context.Context) error {
	ctrlURL, err := withApp(e.url, "", "chaos-controller")
	if err != nil {
		return err
	}
	if e.ctrl, err = store.Open(ctx, ctrlURL, 30*time.Second); err != nil {
		return err
	}
	e.ctrl.SetMaxOpenConns(4)
	e.ctrl.SetMaxIdleConns(4)
	r, err := migrations.NewRunner(e.ctrl, migrations.DefaultSchema)
	if err == nil {
		_, err = r.Up(ctx, 0)
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := e.ctrl.ExecContext(ctx, sqlCreateExecutions); err != nil {
		return fmt.Errorf("create chaos.executions: %w", err)
	}
	if e.eng, err = engine.New(e.ctrl, engine.Config{NoWorker: true, Logger: e.log, Retention: -1}); err != nil {
		return err
	}
	if err := e.eng.Register(chaosWorkflow(func(context.Context, *engine.TaskHandle) error { return nil })); err != nil {
		return err
	}
	for i := range e.o.workers {
		p, err := newProxy(e.target)
		if err != nil {
			return err
		}
		w := &worker{name: fmt.Sprintf("w%d", i+1), proxy: p}
		e.workers = append(e.workers, w)
		if err := e.start(ctx, w, true); err != nil {
			return err
		}
	}
	return nil
}

// start starts w's process; with ready it waits for the worker to say it
// runs.
func (e *env) start(ctx context.Context, w *worker, ready bool) error {
	e.seq++
	db, err := withApp(e.url, w.proxy.addr(), "chaos-worker-"+w.name)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	wo := workerOptions{db: db, name: w.name, slots: e.o.slots, work: e.o.work, lease: lease, heartbeat: heartbeat, rescue: rescue}
	cmd := exec.Command(exe, wo.args()...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	logf, err := os.Create(filepath.Join(e.logDir, fmt.Sprintf("%s-%d.log", w.name, e.seq)))
	if err != nil {
		return err
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	up := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "READY") {
				close(up)
				signalled = true
			}
		}
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	w.cmd, w.exited = cmd, exited
	if !ready {
		return nil
	}
	select {
	case <-up:
		return nil
	case <-exited:
		return fmt.Errorf("worker %s exited before it was ready (log in %s)", w.name, e.logDir)
	case <-time.After(time.Minute):
		return fmt.Errorf("worker %s not ready within a minute", w.name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill SIGKILLs w's process and waits for it to exit.
func (e *env) kill(w *worker) {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// stopWorkers stops every worker gracefully (SIGKILL after a minute).
func (e *env) stopWorkers() error {
	var errs []string
	for _, w := range e.workers {
		select {
		case <-w.exited:
			continue
		default:
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range e.workers {
		select {
		case <-w.exited:
		case <-time.After(time.Minute):
			errs = append(errs, w.name+" did not stop")
			e.kill(w)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (e *env) close() {
	for _, w := range e.workers {
		if w.cmd != nil {
			select {
			case <-w.exited:
			default:
				e.kill(w)
			}
		}
		w.proxy.close()
	}
	if e.ctrl != nil {
		e.ctrl.Close()
	}
}

// offer enqueues runs at o.rate until ctx ends, in batches every 100 ms.
// Failed enqueues (the server is down) are skipped: the verification
// counts the tasks the database holds.
func (e *env) offer(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	per := max(1, e.o.rate/10)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		batch := make([]engine.EnqueueParams, per)
		for i := range batch {
			batch[i] = engine.EnqueueParams{Workflow: workflowName, Input: map[string]int{}}
		}
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = e.eng.EnqueueMany(ectx, batch)
		cancel()
	}
}

// sample records the count of completed tasks every 200 ms until ctx
// ends.
func (e *env) sample(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		var n int64
		err := e.ctrl.QueryRowContext(qctx, sqlCountCompleted).Scan(&n)
		cancel()
		if err == nil {
			e.mu.Lock()
			e.samples = append(e.samples, sample{at: time.Now(), completed: n})
			e.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// drain waits until every task is finished; false after within.
func (e *env) drain(ctx context.Context, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var n int64
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := e.ctrl.QueryRowContext(qctx, sqlCountUnfinished).Scan(&n)
		cancel()
		if err == nil && n == 0 {
			return true
		}
		if sleep(ctx, 200*time.Millisecond) != nil { // poll interval of a condition with a deadline
			return false
		}
	}
	return false
}

// verify fills res from the database.
func (e *env) verify(ctx context.Context, res *result) error {
	err := e.ctrl.QueryRowContext(ctx, sqlVerify).Scan(&res.enqueued, &res.completed, &res.executions,
		&res.repeats, &res.duplicated, &res.unrecorded, &res.rescued, &res.completedTwice)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	res.lost = res.enqueued - res.completed
	if res.duplicated == 0 {
		return nil
	}
	rows, err := e.ctrl.QueryContext(ctx, sqlDuplicateExamples)
	if err != nil {
		return fmt.Errorf("describe duplicates: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var task int64
		var execs, events string
		if err := rows.Scan(&task, &execs, &events); err != nil {
			return err
		}
		e.notef("duplicated task %d: executions %s; events %s", task, execs, events)
	}
	return rows.Err()
}

// completedAt is the count of completed tasks at the last sample at or
// before t.
func (e *env) completedAt(t time.Time) int64 {
	var n int64
	for _, s := range e.samples {
		if s.at.After(t) {
			break
		}
		n = s.completed
	}
	return n
}

// rates fills the throughput columns: each phase's completions a second,
// and how long after the fault the first second began whose completions
// reached 90% of the baseline's.
func (e *env) rates(res *result, t0, tFault, tHealed, tEnd time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rate := func(a, b time.Time) float64 {
		return float64(e.completedAt(b)-e.completedAt(a)) / b.Sub(a).Seconds()
	}
	res.baseline = rate(t0, tFault)
	res.fault = rate(tFault, tHealed)
	res.after = rate(tHealed, tEnd)
	res.recovery = -1
	for _, s := range e.samples {
		if s.at.Before(tHealed.Add(time.Second)) {
			continue
		}
		if float64(s.completed-e.completedAt(s.at.Add(-time.Second))) >= 0.9*res.baseline {
			res.recovery = s.at.Sub(tHealed) - time.Second // when that second began
			break
		}
	}
}

// sleep waits d (a phase of the scenario, timed by design) or until ctx
// ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
