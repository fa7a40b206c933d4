package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/engine"
)

const (
	historyGoal  = 0.90      // burn-down over the history ÷ on an empty database
	historyChunk = 50_000    // runs per seeding statement
	historyDaily = 1_000_000 // seeded runs per day of history
)

// history compares the burn-down on an empty database with the same
// burn-down over -history-tasks finished one-task runs (their tasks, and
// three events each) of the same queue and workflow, written with SQL.
// A burn-down lasts seconds, and this kind of machine drifts by ±15% over
// such spans, so it alternates -history-rounds pairs: each round drains
// -history-n runs on a fresh empty database, then as many on the seeded
// one (kept across rounds; each round measures only its own tasks, and
// leaves them to the history of the next). Each burn-down starts after a
// checkpoint. It reports each round, the medians, the median of the
// rounds' ratios (the goal's figure) and the claim p99 of each side (the
// engine's histogram over all rounds).
func (b *bench) history(ctx context.Context) error {
	if b.o.historyTasks < 1 {
		return fmt.Errorf("-history-tasks must be at least 1, got %d", b.o.historyTasks)
	}
	n := b.o.historyN
	if n < 1 {
		return fmt.Errorf("-history-n must be at least 1, got %d", n)
	}
	rounds := b.o.historyRounds
	if rounds < 1 {
		return fmt.Errorf("-history-rounds must be at least 1, got %d", rounds)
	}
	full, drop, err := b.newDB(ctx, "history")
	if err != nil {
		return err
	}
	defer drop()
	if err := b.seedHistory(ctx, full); err != nil {
		return err
	}
	var empties, fulls, ratios []float64
	var emptyClaims, fullClaims claimHist
	for r := 1; r <= rounds; r++ {
		label := fmt.Sprintf("round %d/%d, ", r, rounds)
		h0 := readClaims()
		empty, err := b.burnWith(ctx, burnSpec{scenario: "history", label: label + "empty: ", n: n, slots: b.o.slots, batch: b.o.batch, checkpoint: true})
		if err != nil {
			return fmt.Errorf("burn-down on an empty database: %w", err)
		}
		h1 := readClaims()
		over, err := b.burnWith(ctx, burnSpec{scenario: "history", label: label + "with history: ", n: n, slots: b.o.slots, batch: b.o.batch,
			checkpoint: true, on: full})
		if err != nil {
			return fmt.Errorf("burn-down over the history: %w", err)
		}
		h2 := readClaims()
		emptyClaims, fullClaims = emptyClaims.plus(h1.since(h0)), fullClaims.plus(h2.since(h1))
		empties, fulls = append(empties, empty.rate), append(fulls, over.rate)
		ratios = append(ratios, over.rate/empty.rate)
		b.add("history", fmt.Sprintf("round %d: tasks/s empty; over the history; ratio", r),
			fmt.Sprintf("%s; %s; %.2f", perSec(empty.rate), perSec(over.rate), over.rate/empty.rate), "", "")
	}
	b.add("history", fmt.Sprintf("empty: tasks/s, %d one-task runs (median of %d)", n, rounds), perSec(median(empties)), "", "")
	b.add("history", "empty: claim p99 (engine histogram)", emptyClaims.p99(), "", "")
	b.add("history", fmt.Sprintf("with %d finished: tasks/s, %d one-task runs (median of %d)", b.o.historyTasks, n, rounds), perSec(median(fulls)), "", "")
	b.add("history", fmt.Sprintf("with %d finished: claim p99 (engine histogram)", b.o.historyTasks), fullClaims.p99(), "", "")
	ratio := median(ratios)
	b.check("history", fmt.Sprintf("with history ÷ empty burn-down (median of %d rounds)", rounds), fmt.Sprintf("%.2f", ratio),
		fmt.Sprintf("≥ %.2f", historyGoal), ratio >= historyGoal)
	return nil
}

// seedHistory writes -history-tasks finished one-task runs of the
// burn-down's workflow, in chunks, vacuums and analyzes them, and sets
// the scratch's task floor above them.
func (b *bench) seedHistory(ctx context.Context, s *scratch) error {
	total := b.o.historyTasks
	span := time.Duration(max(1, (total+historyDaily-1)/historyDaily)) * 24 * time.Hour
	var seeded atomic.Int64
	stop := b.progress("seed history", int64(total), seeded.Load)
	start := time.Now()
	for from := 0; from < total; from += historyChunk {
		count := min(historyChunk, total-from)
		err := s.q.SeedFinished(ctx, benchdb.FinishedParams{From: from, Count: count, Total: total, Span: span,
			Workflow: "noop", Task: "t", Queue: engine.DefaultQueue})
		if err != nil {
			stop()
			return err
		}
		seeded.Add(int64(count))
	}
	stop()
	seedTook := time.Since(start)
	b.log.Info("vacuum analyze the history")
	if err := s.q.VacuumAnalyze(ctx); err != nil {
		return err
	}
	floor, err := s.q.MaxTaskID(ctx)
	if err != nil {
		return err
	}
	s.taskFloor = floor
	tasks, err := s.q.TableStats(ctx, "tasks")
	if err != nil {
		return err
	}
	events, err := s.q.TableStats(ctx, "task_events")
	if err != nil {
		return err
	}
	b.add("history", "seed with SQL (+ VACUUM ANALYZE)",
		fmt.Sprintf("%d runs, %d tasks, %d events over %s in %s (+ %s); tasks %.0f MB, task_events %.0f MB", total, total, 3*total,
			span, seedTook.Round(time.Second), (time.Since(start)-seedTook).Round(time.Second),
			float64(tasks.Bytes)/1e6, float64(events.Bytes)/1e6), "", "")
	return nil
}

// median returns the median of xs (the mean of the middle two for an
// even count); xs is not modified. It is 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
