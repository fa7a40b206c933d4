package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/benchdb"
)

const (
	historyGoal  = 0.90      // burn-down over the history ÷ on an empty database
	historyChunk = 50_000    // runs per seeding statement
	historyDaily = 1_000_000 // seeded runs per day of history
)

// history runs the burn-down twice, each after a checkpoint: on an empty
// database, then on one that already holds -history-tasks finished
// one-task runs (their tasks, and three events each) in the same queue
// and workflow, written with SQL. It reports both rates, their ratio and
// the claim p99 of each (the engine's histogram).
func (b *bench) history(ctx context.Context) error {
	if b.o.historyTasks < 1 {
		return fmt.Errorf("-history-tasks must be at least 1, got %d", b.o.historyTasks)
	}
	n := b.o.historyN
	if n < 1 {
		return fmt.Errorf("-history-n must be at least 1, got %d", n)
	}
	h0 := readClaims()
	empty, err := b.burnWith(ctx, burnSpec{scenario: "history", label: "empty: ", n: n, slots: b.o.slots, batch: b.o.batch, checkpoint: true})
	if err != nil {
		return fmt.Errorf("burn-down on an empty database: %w", err)
	}
	h1 := readClaims()
	full, err := b.burnWith(ctx, burnSpec{scenario: "history", label: "with history: ", n: n, slots: b.o.slots, batch: b.o.batch,
		checkpoint: true, seed: b.seedHistory})
	if err != nil {
		return fmt.Errorf("burn-down over the history: %w", err)
	}
	h2 := readClaims()
	b.add("history", fmt.Sprintf("empty: tasks/s, %d one-task runs", n), perSec(empty.rate), "", "")
	b.add("history", "empty: claim p99 (engine histogram)", h1.since(h0).p99(), "", "")
	b.add("history", fmt.Sprintf("with %d finished: tasks/s, %d one-task runs", b.o.historyTasks, n), perSec(full.rate), "", "")
	b.add("history", fmt.Sprintf("with %d finished: claim p99 (engine histogram)", b.o.historyTasks), h2.since(h1).p99(), "", "")
	ratio := full.rate / empty.rate
	b.check("history", "with history ÷ empty burn-down", fmt.Sprintf("%.2f", ratio), fmt.Sprintf("≥ %.2f", historyGoal), ratio >= historyGoal)
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
