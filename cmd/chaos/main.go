// Command chaos runs Cairn's fault suite: real worker processes (this
// program, re-executed as "chaos worker ...") embed the engine and record
// every execution of a task durably, while the controller offers a steady
// load and injects one fault per scenario: a PostgreSQL crash and
// restart, backend kills, pool exhaustion, a SIGKILLed worker, repeated
// kills, lost commit acknowledgements and a partition longer than the
// lease. Each scenario runs a baseline, the fault, a recovery, then drains
// and verifies: nothing lost, and no task executed again unless an earlier
// attempt of it was interrupted or failed.
//
//	go run ./cmd/chaos                         # every scenario, full length
//	go run ./cmd/chaos -scenario partition -short
//
// Without DATABASE_URL it starts a private PostgreSQL cluster (removed
// afterwards); the crash scenario always starts a cluster of its own.
// Every scenario runs in a fresh database. Workers reach PostgreSQL
// through a TCP proxy per worker in this process, on loopback. It exits 1
// when a scenario loses a task or executes one again unexplained.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	scenario string
	short    bool
	runs     int
	workers  int
	slots    int
	rate     int
	work     time.Duration
	// private ignores DATABASE_URL: the test crashes and exhausts its
	// server, which must be its own.
	private bool
}

func main() {
	if os.Getenv(workerEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.scenario, "scenario", "all", "scenarios to run, comma-separated: "+strings.Join(scenarioNames(), "|")+"|all")
	flag.BoolVar(&o.short, "short", false, "a few seconds per phase (for tests)")
	flag.IntVar(&o.runs, "runs", 1, "runs of each scenario")
	flag.IntVar(&o.workers, "workers", 3, "worker processes")
	flag.IntVar(&o.slots, "slots", 4, "slots of each worker")
	flag.IntVar(&o.rate, "rate", 100, "offered load, runs/s")
	flag.DurationVar(&o.work, "work", 50*time.Millisecond, "how long each task works")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := run(ctx, o, logger, os.Stdout)
	if err != nil {
		logger.Error("chaos failed", slog.Any("error", err))
		os.Exit(1)
	}
	if bad := failures(results); len(bad) > 0 {
		logger.Error("faults broke a guarantee", slog.String("scenarios", strings.Join(bad, ", ")))
		os.Exit(1)
	}
}

// run runs the chosen scenarios, prints their table to out and returns
// their results. An error is a failure to run, not a broken guarantee.
func run(ctx context.Context, o options, logger *slog.Logger, out io.Writer) ([]result, error) {
	chosen, err := parseScenarios(o.scenario)
	if err != nil {
		return nil, err
	}
	if o.runs < 1 || o.workers < 2 || o.slots < 1 || o.rate < 1 {
		return nil, errors.New("-runs, -slots and -rate must be positive and -workers at least 2")
	}
	srv, err := openServer(ctx, o, logger)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	var results []result
	for _, sc := range chosen {
		for i := range o.runs {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			logger.Info("scenario start", slog.String("scenario", sc.name), slog.Int("run", i+1))
			r, err := runScenario(ctx, o, logger, srv, sc)
			if err != nil {
				r = result{scenario: sc.name, err: err}
				logger.Error("scenario failed to run", slog.String("scenario", sc.name), slog.Any("error", err))
			} else {
				logger.Info("scenario done", slog.String("scenario", sc.name), slog.String("row", r.String()))
			}
			results = append(results, r)
		}
	}
	printTable(out, o, results)
	return results, nil
}

// failures names the scenarios that did not run or broke a guarantee.
func failures(results []result) []string {
	var bad []string
	for _, r := range results {
		if !r.ok() {
			bad = append(bad, r.scenario)
		}
	}
	return bad
}

func parseScenarios(s string) ([]scenario, error) {
	if s == "all" {
		return scenarios, nil
	}
	var out []scenario
	for _, name := range strings.Split(s, ",") {
		found := false
		for _, sc := range scenarios {
			if sc.name == strings.TrimSpace(name) {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q (want %s or all)", name, strings.Join(scenarioNames(), ", "))
		}
	}
	return out, nil
}

func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return names
}
