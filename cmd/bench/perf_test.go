package main

import (
	"strings"
	"testing"
)

// perf script -F comm,pid,ip,sym, as perf 6.1 prints it: four samples,
// one idle, one of this process (pid 4242) reading claimed rows, two of
// PostgreSQL (one inserting into a B-tree under an update, one in an
// unresolved frame).
const perfScriptSample = `swapper     0 
	ffffffff8225f8ab pv_native_safe_halt
	ffffffff813d00d6 do_idle

bench_new  4242 
	          2c5e10 github.com/lib/pq.(*rows).Next
	          2d1f00 github.com/cairnhq/cairn/store.(*claimedRows).scanRows
	          2d2000 github.com/cairnhq/cairn/store.(*Store).runPrepared

postgres  31337 
	          1a2b3c _bt_doinsert
	          1a2c00 btinsert
	          1a2d00 ExecInsertIndexTuples
	          3f0c65 PostmasterMain

postgres  31338 
	          3ef138 [unknown]
	          152b06 main
`

func TestFoldPerfCountsEachSampleInItsProcessAndParts(t *testing.T) {
	t.Parallel()
	sh, err := foldPerf(strings.NewReader(perfScriptSample), 4242)
	if err != nil {
		t.Fatal(err)
	}
	if sh.total != 4 {
		t.Fatalf("total = %d, want 4", sh.total)
	}
	for proc, want := range map[string]int{"idle": 1, "engine": 1, "postgres": 2, "other": 0} {
		if got := sh.procs[proc]; got != want {
			t.Errorf("%s samples = %d, want %d", proc, got, want)
		}
	}
	for i, p := range perfParts {
		want := 0
		switch p.name {
		case "B-tree entries written", "claimed rows read":
			want = 1
		}
		if sh.parts[i] != want {
			t.Errorf("part %q = %d samples, want %d", p.name, sh.parts[i], want)
		}
	}
	out := sh.format("burndown", "x.data")
	for _, want := range []string{"50.0% PostgreSQL", "25.0% engine (this process)", "25.0% PostgreSQL: B-tree entries written"} {
		if !strings.Contains(out, want) {
			t.Errorf("format lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatLeavesOutTheEngineOfARunWithoutIt(t *testing.T) {
	t.Parallel()
	sh, err := foldPerf(strings.NewReader(perfScriptSample), 1) // no sample is this process's
	if err != nil {
		t.Fatal(err)
	}
	out := sh.format("ceiling cairn", "x.data")
	if strings.Contains(out, "engine: ") {
		t.Errorf("engine parts shown for a run without the engine:\n%s", out)
	}
	if !strings.Contains(out, "PostgreSQL: B-tree entries written") {
		t.Errorf("PostgreSQL parts missing:\n%s", out)
	}
}

func TestFoldPerfWithoutSamplesFails(t *testing.T) {
	t.Parallel()
	if _, err := foldPerf(strings.NewReader(""), 1); err == nil {
		t.Fatal("no error for a recording without samples")
	}
}

func TestHoldsMatchesGoFunctionsByTheEndOfTheirName(t *testing.T) {
	t.Parallel()
	stack := []string{"github.com/cairnhq/cairn/engine.(*Engine).execute", "runtime.goexit.abi0"}
	if !holds(stack, []string{"engine.(*Engine).execute"}) {
		t.Error("qualified Go name not matched by its package-relative end")
	}
	if holds(stack, []string{"(*Engine).exec"}) {
		t.Error("a prefix of a function name matched")
	}
	if holds([]string{"xbtinsert"}, []string{"btinsert"}) {
		t.Error("a name ending in another matched it")
	}
}
