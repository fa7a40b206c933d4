package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one scenario run's row.
type result struct {
	scenario   string
	err        error // the scenario could not run
	enqueued   int64
	completed  int64
	lost       int64 // enqueued but not completed at the end
	executions int64 // handler executions recorded
	repeats    int64 // executions again after an interrupted or failed attempt
	duplicated int64 // executions again with no such attempt: a broken guarantee
	unrecorded int64 // completed without a recorded execution: a broken guarantee
	rescued    int64 // rescues of expired leases
	// completedTwice counts tasks with two completions in their history:
	// a broken guarantee (a stale attempt's write got through).
	completedTwice int64
	baseline       float64
	fault          float64
	after          float64
	recovery       time.Duration // -1: never back to 90% of the baseline
	notes          []string
}

// ok reports whether the scenario ran and kept its guarantees.
func (r result) ok() bool {
	return r.err == nil && r.lost == 0 && r.duplicated == 0 && r.unrecorded == 0 && r.completedTwice == 0 && r.enqueued > 0
}

func (r result) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("enqueued=%d completed=%d lost=%d executions=%d repeats=%d duplicated=%d rescued=%d baseline=%.0f/s fault=%s after=%s recovery=%s; %s",
		r.enqueued, r.completed, r.lost, r.executions, r.repeats, r.duplicated, r.rescued,
		r.baseline, pct(r.fault, r.baseline), pct(r.after, r.baseline), r.recoveryText(), strings.Join(r.notes, "; "))
}

func (r result) recoveryText() string {
	if r.recovery < 0 {
		return "never"
	}
	return max(r.recovery, 0).Round(100 * time.Millisecond).String()
}

func pct(x, base float64) string {
	if base <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x/base)
}

// printTable prints one row per scenario run, then the notes.
func printTable(out io.Writer, o options, results []result) {
	p := o.phases()
	fmt.Fprintf(out, "\nphases: baseline %s, fault %s (partition: at least lease %s + 3s), recovery %s; %d workers x %d slots, %d runs/s offered, %s of work a task\n",
		p.baseline, p.fault, lease, p.recovery, o.workers, o.slots, o.rate, o.work)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tenqueued\tcompleted\tlost\texecutions\trepeats\tduplicated\trescued\tbaseline/s\tfault\tafter\trecovery\tstatus\t")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t\t\t\tERROR\t\n", r.scenario)
			continue
		}
		status := "ok"
		if !r.ok() {
			status = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", r.scenario, r.enqueued, r.completed,
			r.lost, r.executions, r.repeats, r.duplicated, r.rescued, r.baseline, pct(r.fault, r.baseline),
			pct(r.after, r.baseline), r.recoveryText(), status)
	}
	tw.Flush()
	for _, r := range results {
		switch {
		case r.err != nil:
			fmt.Fprintf(out, "  %s: error: %v\n", r.scenario, r.err)
		case r.unrecorded > 0 || r.completedTwice > 0:
			fmt.Fprintf(out, "  %s: %d tasks completed without a recorded execution, %d completed twice; %s\n",
				r.scenario, r.unrecorded, r.completedTwice, strings.Join(r.notes, "; "))
		default:
			fmt.Fprintf(out, "  %s: %s\n", r.scenario, strings.Join(r.notes, "; "))
		}
	}
}
