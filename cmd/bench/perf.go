package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// With -perf, each drain (from the engine's start to the last
// completion) and each of the ceiling's pgbench runs is recorded by Linux
// perf, system-wide with call graphs, and the bench
// prints where the machine's CPU went: by process (PostgreSQL, this
// process with its engine, idle) and by the pieces of work the hot
// statements and the engine are made of (perfParts). It answers what a
// change could buy before it is written: a part of 2% cannot give 5%.
// It sees only this machine: with DATABASE_URL on another host, the
// PostgreSQL rows are empty.

// perfFrequency is the sampling rate per CPU: about 2,000 samples a
// second on this 2-core machine, enough for parts of 1% over a drain of
// a few seconds.
const perfFrequency = "999"

// perfPart is a piece of work: the samples whose stack holds one of
// frames (a function name; for Go, the end of its qualified name), in a
// process of kind proc.
type perfPart struct {
	name   string
	proc   string // "postgres" or "engine"
	frames []string
}

// perfParts are the pieces of work shown, inclusive (a part's callees
// count in it) and so overlapping where one calls another.
var perfParts = []perfPart{
	{"B-tree entries written", "postgres", []string{"btinsert"}},
	{"BRIN entries written", "postgres", []string{"brininsert"}},
	{"index scans", "postgres", []string{"index_getnext_tid"}},
	{"heap updates", "postgres", []string{"heap_update"}},
	{"heap inserts", "postgres", []string{"heap_insert"}},
	{"row locks", "postgres", []string{"heap_lock_tuple"}},
	{"tuplestores (CTE results, transition tables)", "postgres", []string{"tuplestore_puttupleslot"}},
	{"statement-level triggers (task counts)", "postgres", []string{"AfterTriggerEndQuery"}},
	{"CHECK constraints", "postgres", []string{"ExecConstraints"}},
	{"jsonb parameters parsed", "postgres", []string{"jsonb_in"}},
	{"planning", "postgres", []string{"pg_plan_queries"}},
	{"executor start", "postgres", []string{"standard_ExecutorStart"}},
	{"commits", "postgres", []string{"CommitTransactionCommand"}},
	{"claimed rows read", "engine", []string{"store.(*claimedRows).scanRows"}},
	{"moved rows read", "engine", []string{"store.(*movedRows).scanRows"}},
	{"executions (start, handler, result)", "engine", []string{"engine.(*Engine).startExecution", "engine.(*Engine).execute"}},
	{"argument checks", "engine", []string{"store.checkArgs"}},
	{"JSON encoding", "engine", []string{"encoding/json.Marshal"}},
	{"garbage collection", "engine", []string{"runtime.gcBgMarkWorker"}},
}

// perfRecording is a perf record in progress.
type perfRecording struct {
	cmd  *exec.Cmd
	file string
	errs bytes.Buffer
}

// perfSpan starts recording the machine with perf when -perf is set; the
// function it returns stops the recording and prints its shares under
// label (without -perf, both do nothing).
func (b *bench) perfSpan(label string) (func(context.Context), error) {
	if b.o.perf == "" {
		return func(context.Context) {}, nil
	}
	rec, err := b.startPerf(label)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		if err := rec.stop(); err != nil {
			b.log.Warn("perf record", "error", err)
			return
		}
		b.printPerf(ctx, label, rec)
	}, nil
}

// startPerf starts recording the whole machine into the next file of the
// -perf prefix (run checked that perf is there).
func (b *bench) startPerf(label string) (*perfRecording, error) {
	b.perfRuns++
	file := fmt.Sprintf("%s-%d-%s.data", b.o.perf, b.perfRuns, strings.NewReplacer(" ", "_", "/", "_", ":", "").Replace(label))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	r := &perfRecording{file: file}
	r.cmd = exec.Command("perf", "record", "-a", "-g", "-F", perfFrequency, "-o", file, "-q")
	r.cmd.Stderr = &r.errs
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	return r, nil
}

// stop ends the recording (perf writes its file on SIGINT).
func (r *perfRecording) stop() error {
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled() {
			err = nil // ended by the interrupt itself
		}
		if err != nil {
			return fmt.Errorf("perf record: %w: %s", err, strings.TrimSpace(r.errs.String()))
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		return errors.New("perf record did not stop within 30 s")
	}
}

// perfShares is a recording folded: samples in all, by process kind, and
// by part.
type perfShares struct {
	total int
	procs map[string]int // postgres, engine, idle, other
	parts []int          // by perfParts index
}

// printPerf folds the recording and prints its shares of the machine.
func (b *bench) printPerf(ctx context.Context, scenario string, r *perfRecording) {
	cmd := exec.CommandContext(ctx, "perf", "script", "-i", r.file, "-F", "comm,pid,ip,sym")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.log.Warn("perf script", "error", err)
		return
	}
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		b.log.Warn("perf script", "error", err)
		return
	}
	sh, err := foldPerf(out, os.Getpid())
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("%w: %s", werr, strings.TrimSpace(errs.String()))
	}
	if err != nil {
		b.log.Warn("perf script", "error", err)
		return
	}
	fmt.Fprint(b.out, sh.format(scenario, r.file))
}

// foldPerf reads perf script output (-F comm,pid,ip,sym: a header line
// per sample, then its frames, leaf first) and counts each sample once
// in its process kind and in every part its stack holds; self is this
// process's pid.
func foldPerf(r io.Reader, self int) (perfShares, error) {
	sh := perfShares{procs: map[string]int{}, parts: make([]int, len(perfParts))}
	var proc string
	var frames []string
	flush := func() {
		if proc == "" {
			return
		}
		sh.total++
		sh.procs[proc]++
		for i, p := range perfParts {
			if p.proc == proc && holds(frames, p.frames) {
				sh.parts[i]++
			}
		}
		proc, frames = "", frames[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			flush()
			proc = perfProc(line, self)
			continue
		}
		// "\t    ffffffff81000c82 name" (name may hold spaces; unknown
		// frames read "[unknown]").
		f := strings.Fields(line)
		if len(f) >= 2 {
			frames = append(frames, strings.Join(f[1:], " "))
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return sh, err
	}
	if sh.total == 0 {
		return sh, errors.New("no samples")
	}
	return sh, nil
}

// perfProc is the kind of process of a sample header line, "comm pid"
// (comm may hold spaces).
func perfProc(header string, self int) string {
	f := strings.Fields(header)
	if len(f) < 2 {
		return "other"
	}
	pid, _ := strconv.Atoi(f[len(f)-1])
	switch {
	case pid == self:
		return "engine"
	case f[0] == "postgres":
		return "postgres"
	case f[0] == "swapper" || pid == 0:
		return "idle"
	}
	return "other"
}

// holds reports whether a frame of stack names one of fns: exactly, or
// (a Go function) as the end of its qualified name.
func holds(stack, fns []string) bool {
	for _, s := range stack {
		for _, fn := range fns {
			if s == fn || strings.HasSuffix(s, "/"+fn) || strings.HasSuffix(s, "."+fn) {
				return true
			}
		}
	}
	return false
}

func (sh perfShares) format(scenario, file string) string {
	pct := func(n int) string { return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(sh.total)) }
	var w strings.Builder
	fmt.Fprintf(&w, "\n[%s] where the machine's CPU went (perf, %d samples, %s; parts inclusive, so they overlap)\n", scenario, sh.total, file)
	fmt.Fprintf(&w, "  %s PostgreSQL   %s engine (this process)   %s idle   %s other\n",
		pct(sh.procs["postgres"]), pct(sh.procs["engine"]), pct(sh.procs["idle"]), pct(sh.procs["other"]))
	for i, p := range perfParts {
		if 100*sh.procs[p.proc] < sh.total {
			continue // a process under 1% of the machine (no engine in a pgbench run)
		}
		who := "PostgreSQL"
		if p.proc == "engine" {
			who = "engine"
		}
		fmt.Fprintf(&w, "  %s %s: %s\n", pct(sh.parts[i]), who, p.name)
	}
	return w.String()
}
