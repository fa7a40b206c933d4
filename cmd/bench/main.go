// Command bench measures Cairn on a real PostgreSQL server: burn-down
// throughput (large and small deployments), steady state, DAG workflows, claim latency, deferral memory,
// scale-out across processes, the site's read queries, bloat under a held
// snapshot, a burn-down over a large finished history, pruning a month of
// history (dropping partitions against deleting rows), and the ceiling:
// pgbench doing the burn-down's database work with no engine in the way.
//
//	go run ./cmd/bench -scenario all
//	go run ./cmd/bench -scenario burndown -n 200000 -slots 256 -pgstats
//
// Without DATABASE_URL it starts a private PostgreSQL cluster with the
// default durability (fsync and synchronous_commit on) and removes it
// afterwards. Every scenario runs in a fresh database that is dropped at
// its end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// options are the command's flags.
type options struct {
	scenario     string
	n            int
	slots        int
	smallN       int
	fairA        int
	smallSlots   int
	batch        int
	enqBatch     int
	duration     time.Duration
	rate         float64
	dagRuns      int
	dagFlat      bool
	latProbes    int
	latRate      float64
	enqClients   int
	enqDuration  time.Duration
	deferred     int
	deferSlots   int
	scaleN       int
	scaleProcs   string
	siteTasks    int
	siteRuns     int
	ceilClients  int
	ceilBatch    int
	ceilCkpt     bool
	ceilSetup    string
	ceilVariants string
	pruneDays    int
	prunePerDay  int
	pruneChunk   int
	pruneWays    string
	keepCluster  bool
	pgStats      bool
	perf         string
	cpuProfile   string
	memProfile   string
	pgSettings   settingsFlag
	logLevel     slog.Level
	worker       bool
	workerDB     string
	workerName   string

	// bloat and history (issue 16)
	bloatDuration time.Duration
	bloatRate     float64
	bloatRecover  time.Duration
	bloatKeys     int
	historyTasks  int
	historyN      int
	historyRounds int
	keyedRounds   int
	keyedKeys     int
}

type settingsFlag map[string]string

func (s settingsFlag) String() string { return fmt.Sprint(map[string]string(s)) }
func (s settingsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want name=value, got %q", v)
	}
	s[k] = val
	return nil
}

var scenarioNames = []string{"burndown", "small", "keyed", "fair", "steady", "dag", "latency", "deferral", "scaleout", "site", "bloat", "history", "prune", "enqueue", "ceiling"}

// allScenarios are the scenarios of "all": every one but ceiling, which
// seeds and drains N tasks twice with pgbench (a few minutes at the
// default N).
var allScenarios = scenarioNames[:len(scenarioNames)-1]

func main() {
	o := options{pgSettings: settingsFlag{}}
	flag.StringVar(&o.scenario, "scenario", "all", "scenarios to run, comma-separated: "+strings.Join(scenarioNames, "|")+"|all (all but ceiling)")
	flag.IntVar(&o.n, "n", 200_000, "burn-down: single-task runs inserted before the engine starts")
	flag.IntVar(&o.smallN, "small-n", 20_000, "small: single-task runs of the small-deployment burn-down")
	flag.IntVar(&o.fairA, "fair-a", 100_000, "fair: tasks of tenant A enqueued ahead of tenant B's 10")
	flag.IntVar(&o.smallSlots, "small-slots", 4, "small: slots of its engine (the engine's default is 4)")
	// River's bench runs its default queue with MaxWorkers 2,000
	// (cmd/river/riverbench): the side-by-side compares like with like.
	flag.IntVar(&o.slots, "slots", 2000, "slots of each engine (burn-down, steady, dag, latency, scale-out), as River's bench's 2,000 workers")
	flag.IntVar(&o.batch, "batch", 1024, "engine CompletionBatch (0: the engine default, 256)")
	flag.IntVar(&o.enqBatch, "enqueue-batch", 2000, "runs per EnqueueMany call when seeding")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "steady: how long to offer load")
	flag.Float64Var(&o.rate, "rate", 0, "steady and latency under load: offered runs/s (0: half the capacity the burn-down measured for enqueue plus run on this machine, else 2000)")
	flag.IntVar(&o.dagRuns, "dag-runs", 20_000, "dag: 10-task workflow runs (1 root -> 8 -> 1 join)")
	flag.BoolVar(&o.dagFlat, "dag-flat", false, "dag: the 10 tasks of a run without dependencies (all roots), to tell the cost of dependencies from that of a run of 10 tasks")
	flag.IntVar(&o.latProbes, "latency-probes", 300, "latency: probes per phase (idle, loaded)")
	flag.Float64Var(&o.latRate, "latency-load", 0, "latency: background runs/s while probing under load (0: like -rate)")
	flag.IntVar(&o.enqClients, "enqueue-clients", 32, "enqueue: goroutines calling Enqueue at once")
	flag.DurationVar(&o.enqDuration, "enqueue-duration", 10*time.Second, "enqueue: how long they call it")
	flag.IntVar(&o.deferred, "deferred", 10_000, "deferral: tasks parked in DeferUntil at once")
	flag.IntVar(&o.deferSlots, "defer-slots", 32, "deferral: slots of the engine holding the deferred tasks")
	flag.IntVar(&o.scaleN, "scale-n", 100_000, "scale-out: tasks per process count")
	flag.StringVar(&o.scaleProcs, "scale-procs", "1,2,4", "scale-out: worker process counts")
	flag.IntVar(&o.siteTasks, "site-tasks", 1_000_000, "site: task rows to seed")
	flag.IntVar(&o.siteRuns, "site-samples", 50, "site: timed executions of each query")
	flag.DurationVar(&o.bloatDuration, "bloat-duration", time.Minute, "bloat: how long to offer load; a snapshot is held over its middle three fifths (full size: 5m)")
	flag.Float64Var(&o.bloatRate, "bloat-rate", 0, "bloat: offered runs/s (0: half the capacity, from this invocation's burn-down or a short one; -1: full speed)")
	flag.DurationVar(&o.bloatRecover, "bloat-recovery", 90*time.Second, "bloat: longest wait after the release for throughput and dead tuples to recover")
	flag.IntVar(&o.bloatKeys, "bloat-keys", 0, "bloat: spread the tasks over this many concurrency keys (flow-controlled claims; 0: unkeyed)")
	flag.IntVar(&o.historyTasks, "history-tasks", 1_000_000, "history: finished one-task runs (3 events each) seeded before the burn-down (full size: 10000000)")
	flag.IntVar(&o.historyN, "history-n", 100_000, "history: one-task runs of each burn-down (empty, then over the history)")
	flag.IntVar(&o.keyedRounds, "keyed-rounds", 3, "keyed: alternated pairs of burn-downs (unkeyed, keyed) of -n runs each; the goal is on the median ratio")
	flag.IntVar(&o.keyedKeys, "keyed-keys", 100, "keyed (and the ceiling's keyed variant): how many concurrency key values the keyed runs take in turn (the goal is set at 100)")
	flag.IntVar(&o.historyRounds, "history-rounds", 3, "history: alternated pairs of burn-downs (empty, over the history); the goal is on the median ratio")
	flag.IntVar(&o.ceilClients, "ceiling-clients", 4, "ceiling: pgbench clients")
	flag.IntVar(&o.ceilBatch, "ceiling-batch", 256, "ceiling: tasks each pgbench transaction claims (and the next completes)")
	flag.BoolVar(&o.ceilCkpt, "ceiling-checkpoint", true, "ceiling: CHECKPOINT after seeding, before pgbench")
	flag.StringVar(&o.ceilSetup, "ceiling-setup", "", "ceiling: a file of SQL run on each seeded database before pgbench, with Cairn's schema first on the search_path: measures what a change of the schema would buy under the same statements (tasks/s then read from the task rows, since the change may drop events; pass a file of SELECT 1 for the baseline)")
	flag.StringVar(&o.ceilVariants, "ceiling-variants", "cairn,bare", "ceiling: the scripts to run, comma-separated: cairn (Cairn's statements), bare (the bare floor), keyed (Cairn's statements on tasks of -keyed-keys concurrency keys)")
	flag.IntVar(&o.pruneDays, "prune-days", 3, "prune: days of finished history to prune (the full size: 30)")
	flag.IntVar(&o.prunePerDay, "prune-per-day", 200_000, "prune: single-task runs a day (two events each; the full size: 1000000)")
	flag.IntVar(&o.pruneChunk, "prune-chunk", 100_000, "prune: runs per seeding statement")
	flag.StringVar(&o.pruneWays, "prune-ways", "drop,delete", "prune: the ways to measure, comma-separated (drop: the engine's; delete: every row)")
	flag.BoolVar(&o.keepCluster, "keep", false, "keep the private cluster's directory (printed) instead of removing it")
	flag.BoolVar(&o.pgStats, "pgstats", false, "print the top statements of pg_stat_statements after each scenario")
	flag.StringVar(&o.perf, "perf", "", "record each drain (and each ceiling pgbench run) with Linux perf (system-wide, call graphs) into PREFIX-N-LABEL.data and print where the machine's CPU went: PostgreSQL, the engine, idle, and the parts of their work")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (engine included) to this file")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end to this file (deferral: also FILE.deferred, with every task parked)")
	flag.Var(o.pgSettings, "pg", "extra private-cluster setting name=value (repeatable)")
	flag.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level (debug, info, warn, error)")
	flag.BoolVar(&o.worker, "worker", false, "internal: run as a scale-out worker process")
	flag.StringVar(&o.workerDB, "worker-db", "", "internal: database URL of a worker process")
	flag.StringVar(&o.workerName, "worker-name", "", "internal: worker name")
	flag.Parse()

	if o.worker {
		os.Exit(workerMain(o))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, logger, os.Stdout); err != nil {
		logger.Error("bench failed", slog.Any("error", err))
		os.Exit(1)
	}
}

// defaultSettings tune the private cluster for a write-heavy load without
// touching durability: fsync, synchronous_commit and full_page_writes stay
// on.
var defaultSettings = map[string]string{
	"shared_buffers":                    "1GB",
	"max_wal_size":                      "8GB",
	"checkpoint_timeout":                "15min",
	"shared_preload_libraries":          "pg_stat_statements",
	"pg_stat_statements.track_planning": "on",
}

func run(ctx context.Context, o options, logger *slog.Logger, out io.Writer) error {
	chosen, err := parseScenarios(o.scenario)
	if err != nil {
		return err
	}
	if o.perf != "" {
		if _, err := exec.LookPath("perf"); err != nil {
			return errors.New("-perf needs Linux perf on the PATH (Debian: apt-get install linux-perf)")
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	serverURL := os.Getenv("DATABASE_URL")
	private := serverURL == ""
	var cluster *pgcluster.Cluster
	if private {
		dir, err := os.MkdirTemp("", "cairn-bench-")
		if err != nil {
			return err
		}
		settings := map[string]string{}
		for k, v := range defaultSettings {
			settings[k] = v
		}
		for k, v := range o.pgSettings {
			settings[k] = v
		}
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: settings, Logger: logger})
		if err != nil {
			os.RemoveAll(dir)
			return err
		}
		defer func() {
			if o.keepCluster {
				_ = c.Stop()
				logger.Info("kept the cluster", slog.String("dir", dir))
				return
			}
			if err := c.Remove(); err != nil {
				logger.Warn("remove cluster", slog.Any("error", err))
			}
			os.RemoveAll(dir)
		}()
		serverURL = c.URL("postgres")
		cluster = c
	}
	srv, err := benchdb.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer srv.Close()
	version, settings, err := srv.Describe(ctx)
	if err != nil {
		return err
	}
	logger.Info("server", slog.String("version", version), slog.Any("settings", settings), slog.Bool("private", private))

	b := &bench{o: o, log: logger, srv: srv, out: out, cluster: cluster}
	for _, name := range chosen {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		logger.Info("scenario start", slog.String("scenario", name))
		if err := b.runScenario(ctx, name); err != nil {
			if ctx.Err() != nil {
				break
			}
			b.add(name, "error", err.Error(), "", "")
			logger.Error("scenario failed", slog.String("scenario", name), slog.Any("error", err))
			continue
		}
		logger.Info("scenario done", slog.String("scenario", name), slog.Duration("took", time.Since(start).Round(time.Millisecond)))
	}

	if o.memProfile != "" {
		_ = writeHeapProfile(o.memProfile)
	}
	fmt.Fprintf(out, "\nCairn bench — %d CPUs, %s, PostgreSQL %s\n", runtime.NumCPU(), memTotal(), version)
	fmt.Fprintf(out, "settings: fsync=%s synchronous_commit=%s full_page_writes=%s shared_buffers=%s max_wal_size=%s\n\n",
		settings["fsync"], settings["synchronous_commit"], settings["full_page_writes"], settings["shared_buffers"], settings["max_wal_size"])
	b.printTable()
	return ctx.Err()
}

func parseScenarios(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			out = append(out, allScenarios...)
		case slices.Contains(scenarioNames, name):
			out = append(out, name)
		default:
			return nil, fmt.Errorf("unknown scenario %q: want %s or all", name, strings.Join(scenarioNames, ", "))
		}
	}
	return out, nil
}

// bench holds what the scenarios share.
type bench struct {
	o   options
	log *slog.Logger
	srv *benchdb.Server
	out io.Writer
	// cluster is the private cluster, nil with DATABASE_URL.
	cluster *pgcluster.Cluster

	results        []result
	burnRate       float64 // tasks/s of the burn-down, when it ran
	burnInsertRate float64 // runs/s of the burn-down's insert phase
	seq            int
	stopWatch      time.Time
	perfRuns       int // recordings made with -perf so far
}

// result is one row of the final table.
type result struct {
	scenario, metric, value, target, status string
}

func (b *bench) add(scenario, metric, value, target, status string) {
	b.results = append(b.results, result{scenario, metric, value, target, status})
	b.log.Info("result", slog.String("scenario", scenario), slog.String("metric", metric), slog.String("value", value))
}

// check adds a row with a target: met when ok.
func (b *bench) check(scenario, metric, value, target string, ok bool) {
	status := "NOT MET"
	if ok {
		status = "met"
	}
	b.add(scenario, metric, value, target, status)
}

func (b *bench) printTable() {
	w := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tMETRIC\tVALUE\tTARGET\tSTATUS")
	for _, r := range b.results {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.scenario, r.metric, r.value, r.target, r.status)
	}
	w.Flush()
}

func (b *bench) runScenario(ctx context.Context, name string) error {
	switch name {
	case "burndown":
		return b.burndown(ctx)
	case "keyed":
		return b.keyed(ctx)
	case "fair":
		return b.fair(ctx)
	case "small":
		return b.small(ctx)
	case "steady":
		return b.steady(ctx)
	case "dag":
		return b.dag(ctx)
	case "latency":
		return b.latency(ctx)
	case "deferral":
		return b.deferral(ctx)
	case "scaleout":
		return b.scaleout(ctx)
	case "site":
		return b.site(ctx)
	case "bloat":
		return b.bloat(ctx)
	case "history":
		return b.history(ctx)
	case "prune":
		return b.prune(ctx)
	case "enqueue":
		return b.enqueueConcurrent(ctx)
	case "ceiling":
		return b.ceiling(ctx)
	}
	return errors.New("unknown scenario " + name)
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "? GB"
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return fmt.Sprintf("%.0f GB RAM", float64(kb)/1024/1024)
}

// writeHeapProfile writes a heap profile, after a GC, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
