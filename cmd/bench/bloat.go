package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/engine"
)

// The bloat scenario's goals (issue 16) and sizes.
const (
	bloatHeldRatio   = 0.80                  // throughput while held ÷ before
	bloatClaimP99    = 50 * time.Millisecond // claim p99 while held
	bloatRecovery    = 60 * time.Second      // release → recovered
	bloatRecoverRate = 0.95                  // recovered: throughput back to this share of before
	bloatWindow      = 5                     // seconds of the trailing throughput window after the release
	bloatPeriods     = 5                     // report periods (a minute each at full size)
	fullSpeedBacklog = 20_000                // -bloat-rate -1: ready tasks kept ahead of the engine
	capacityBurnN    = 50_000                // runs of each capacity burn-down when none ran before
	capacityRounds   = 3                     // capacity burn-downs, of which the median counts: one swings 11,000–16,000 tasks/s here
	minBloatRate     = 100                   // runs/s offered at least, however slow the capacity burn-down
)

// bloatSample is one second of the bloat scenario.
type bloatSample struct {
	at   time.Duration // since the load started
	done int64         // handler runs so far
	dead int64         // n_dead_tup of tasks
}

// bloatPhase is the state of the held snapshot at a moment.
func bloatPhase(at, holdAt, releaseAt time.Duration) string {
	switch {
	case at <= holdAt:
		return "before"
	case at <= releaseAt:
		return "held"
	}
	return "released"
}

// bloat offers a steady load for -bloat-duration while another session
// holds a REPEATABLE READ snapshot open from the end of its first fifth
// to the end of its fourth (minutes 1 to 4 at the full 5 minutes). Once a
// fifth it reports throughput, claim p99 (the engine's histogram), the
// dead tuples of tasks and the state of the claim index; then how long
// after the release throughput and dead tuples took to come back.
func (b *bench) bloat(ctx context.Context) error {
	d := b.o.bloatDuration
	if d < 10*time.Second {
		return fmt.Errorf("-bloat-duration must be at least 10s, got %s", d)
	}
	if b.o.bloatRecover <= 0 {
		return fmt.Errorf("-bloat-recovery must be positive, got %s", b.o.bloatRecover)
	}
	rate, err := b.bloatLoad(ctx)
	if err != nil {
		return err
	}
	s, drop, err := b.newDB(ctx, "bloat")
	if err != nil {
		return err
	}
	defer drop()
	stattuple := s.q.EnablePgstattuple(ctx)
	if !stattuple {
		b.log.Warn("pgstattuple is not available: the claim index is reported by size only")
	}
	var done atomic.Int64
	wf, input := b.bloatWorkflow(counting(&done))
	eng, err := b.newEngine(s, b.o.slots, wf)
	if err != nil {
		return err
	}
	var p *producer
	offered := fmt.Sprintf("%s for %s", perSec(rate), d)
	if rate == 0 {
		// Full speed: the backlog is filled before the engine starts, as
		// River's bench inserts its first jobs before working them.
		p = b.startFiller(ctx, eng, "noop", input, &done, fullSpeedBacklog)
		offered = fmt.Sprintf("full speed (%d ready tasks kept ahead) for %s", fullSpeedBacklog, d)
		for p.sent.Load() < fullSpeedBacklog {
			select {
			case <-ctx.Done():
				p.stop()
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if err := eng.Start(ctx); err != nil {
		if p != nil {
			p.stop()
		}
		return err
	}
	defer shutdown(eng)
	if rate > 0 {
		p = b.startProducer(ctx, eng, "noop", rate, input)
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			p.stop()
		}
	}
	defer stopLoad()

	period := d / bloatPeriods
	holdAt, releaseAt := period, time.Duration(bloatPeriods-1)*period
	b.add("bloat", "offered", offered, "", "")
	b.add("bloat", "snapshot held (REPEATABLE READ, one read of tasks)", fmt.Sprintf("from %s to %s", clock(holdAt), clock(releaseAt)), "", "")

	var (
		snap                  *benchdb.Snapshot
		heldFrom, heldTo      time.Duration // actual times
		doneHold, doneRelease int64
		histHold, histRelease claimHist
		// The claims that ran while the bench read its per-period
		// statistics (pgstattuple over the claim index, a count of the
		// ready rows: under a held snapshot each walks every entry the
		// snapshot keeps, a few hundred milliseconds of a core), before
		// and while the snapshot was held. No period counts them, and the
		// p99s before and while held leave them out; they are printed
		// apart.
		sampledBefore, sampledHeld claimHist
		samplingHeld               time.Duration
		histBefore                 = readClaims()
		histPeriod                 = histBefore
		samples                    []bloatSample
		periodFrom                 time.Duration
		periodDone                 int64
		k                          = 1
	)
	defer func() {
		if snap != nil {
			_ = snap.Release()
		}
	}()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		at, dn := time.Since(start), done.Load()
		ts, err := s.q.TableStats(ctx, "tasks")
		if err != nil {
			return err
		}
		samples = append(samples, bloatSample{at: at, done: dn, dead: ts.Dead})
		b.log.Info("progress", slog.String("phase", "bloat, snapshot "+bloatPhase(at, holdAt, releaseAt)),
			slog.Int64("enqueued", p.sent.Load()), slog.Int64("done", dn), slog.Int64("backlog", p.sent.Load()-dn),
			slog.Int64("tasks_dead_tuples", ts.Dead))

		if k <= bloatPeriods && at >= time.Duration(k)*period {
			h, sampleStart := readClaims(), time.Now()
			if err := b.bloatPeriod(ctx, s, stattuple, k, periodFrom, at, bloatPhase((periodFrom+at)/2, holdAt, releaseAt),
				float64(dn-periodDone)/(at-periodFrom).Seconds(), h.since(histPeriod), ts, p.sent.Load()-dn); err != nil {
				return err
			}
			// The next period starts after the bench's own reads.
			after := readClaims()
			switch {
			case snap != nil:
				sampledHeld, samplingHeld = sampledHeld.plus(after.since(h)), samplingHeld+time.Since(sampleStart)
			case heldFrom == 0:
				sampledBefore = sampledBefore.plus(after.since(h))
			}
			k, periodFrom, periodDone, histPeriod = k+1, at, dn, after
		}
		if snap == nil && heldFrom == 0 && at >= holdAt {
			if snap, err = s.q.HoldSnapshot(ctx); err != nil {
				return err
			}
			heldFrom, doneHold, histHold = time.Since(start), done.Load(), readClaims()
			b.log.Info("snapshot held", slog.Duration("at", heldFrom.Round(time.Second)))
		}
		if snap != nil && at >= releaseAt {
			if err := snap.Release(); err != nil {
				return err
			}
			snap = nil
			heldTo, doneRelease, histRelease = time.Since(start), done.Load(), readClaims()
			b.log.Info("snapshot released", slog.Duration("at", heldTo.Round(time.Second)))
		}
		if at >= d {
			if r := bloatRecovered(samples, heldFrom, heldTo); r.done || at >= heldTo+b.o.bloatRecover {
				break
			}
		}
	}
	stopLoad()

	before := bloatBefore(samples, heldFrom)
	heldRate := float64(doneRelease-doneHold) / (heldTo - heldFrom).Seconds()
	ratio := heldRate / max(before.rate, 1)
	b.check("bloat", "throughput while held ÷ before",
		fmt.Sprintf("%.2f (%s of %s)", ratio, perSec(heldRate), perSec(before.rate)),
		fmt.Sprintf("≥ %.2f", bloatHeldRatio), ratio >= bloatHeldRatio)
	held := histRelease.since(histHold).since(sampledHeld)
	b.add("bloat", "claim p99 before the snapshot (engine histogram)", histHold.since(histBefore).since(sampledBefore).p99(), "", "")
	b.check("bloat", "claim p99 while held (engine histogram)", held.p99(),
		"< "+ms(bloatClaimP99), held.n() > 0 && held.quantile(0.99) < bloatClaimP99)
	b.add("bloat", "claims while held, during the bench's own reads (not above)",
		fmt.Sprintf("%s; %s of reads", sampledHeld.p99(), samplingHeld.Round(time.Millisecond)), "", "")
	r := bloatRecovered(samples, heldFrom, heldTo)
	value := fmt.Sprintf("not within %s (throughput %s; tasks dead tuples ≤ %d %s)", b.o.bloatRecover,
		sinceRelease(r.rateAt, r.rateOK), before.dead, sinceRelease(r.deadAt, r.deadOK))
	if r.done {
		value = fmt.Sprintf("%s (throughput ≥ %.0f%% of before: %s; tasks dead tuples ≤ %d, before's peak: %s)",
			r.at().Round(time.Second), bloatRecoverRate*100, sinceRelease(r.rateAt, true), before.dead, sinceRelease(r.deadAt, true))
	}
	b.check("bloat", "release → recovered", value, "≤ "+bloatRecovery.String(), r.done && r.at() <= bloatRecovery)
	return nil
}

// bloatLoad returns the offered rate: -bloat-rate, else half the
// capacity a burn-down of this invocation measured, else half of what a
// short burn-down measures now. 0 means full speed (-bloat-rate -1).
func (b *bench) bloatLoad(ctx context.Context) (float64, error) {
	switch {
	case b.o.bloatRate < 0:
		return 0, nil
	case b.o.bloatRate > 0:
		return b.o.bloatRate, nil
	case b.burnRate > 0 && b.burnInsertRate > 0:
		return max(b.defaultLoad(), minBloatRate), nil
	}
	n := min(b.o.n, capacityBurnN)
	var rates, inserts []float64
	for i := range capacityRounds {
		label := fmt.Sprintf("capacity burn-down %d/%d: ", i+1, capacityRounds)
		r, err := b.burnWith(ctx, burnSpec{scenario: "bloat", label: label, n: n, slots: b.o.slots, batch: b.o.batch, keyed: b.bloatKey()})
		if err != nil {
			return 0, fmt.Errorf("measure capacity: %w", err)
		}
		b.add("bloat", fmt.Sprintf("%stasks/s, %d one-task runs", label, n), perSec(r.rate), "", "")
		rates, inserts = append(rates, r.rate), append(inserts, r.insertRate)
	}
	rate := median(rates)
	b.add("bloat", "capacity: median of the burn-downs", perSec(rate), "", "")
	return max(halfCapacity(rate, median(inserts)), minBloatRate), nil
}

// bloatWorkflow is the scenario's workflow, one no-op task running h, and
// the input of its i-th run: with -bloat-keys, the task has a
// concurrency limit (loose enough never to bind) keyed by the run's
// tenant, one of that many, in turn.
func (b *bench) bloatWorkflow(h engine.Handler) (engine.Workflow, func(i int64) any) {
	wf := noopWorkflow("noop", h)
	key := b.bloatKey()
	if key == nil {
		return wf, nil
	}
	wf.Tasks[0].Concurrency = &engine.Concurrency{Key: "tenant", Max: b.o.slots}
	return wf, func(i int64) any { return map[string]string{"tenant": key(int(i))} }
}

// bloatKey gives run i's tenant with -bloat-keys (nil without).
func (b *bench) bloatKey() func(i int) string {
	n := b.o.bloatKeys
	if n <= 0 {
		return nil
	}
	return func(i int) string { return "t" + strconv.Itoa(i%n) }
}

// bloatPeriod reports period k (from..to) as a log line and a table row.
func (b *bench) bloatPeriod(ctx context.Context, s *scratch, stattuple bool, k int, from, to time.Duration, phase string,
	rate float64, claims claimHist, ts benchdb.TableStats, backlog int64) error {
	claimIndex := "tasks_claim"
	if b.o.bloatKeys > 0 {
		claimIndex = "tasks_claim_keyed"
	}
	ix, err := s.q.IndexStats(ctx, claimIndex, stattuple)
	if err != nil {
		return err
	}
	ready, err := s.q.CountReady(ctx, b.o.bloatKeys > 0)
	if err != nil {
		return err
	}
	xmin, err := s.q.XminAge(ctx)
	if err != nil {
		return err
	}
	index := fmt.Sprintf("%.1f MB", float64(ix.Bytes)/1e6)
	if ix.Entries >= 0 {
		index += fmt.Sprintf(", %d entries (%d marked dead) for %d ready", ix.Entries, ix.DeadEntries, ready)
	} else {
		index += fmt.Sprintf(" for %d ready", ready)
	}
	b.log.Info("bloat period", slog.Int("period", k), slog.String("span", clock(from)+"–"+clock(to)), slog.String("snapshot", phase),
		slog.String("throughput", perSec(rate)), slog.String("claim_p99", claims.p99()),
		slog.Int64("tasks_dead_tuples", ts.Dead), slog.Int64("tasks_live_tuples", ts.Live), slog.Int64("autovacuums", ts.AutoVacuums),
		slog.String("claim_index", index), slog.Int64("xmin_age", xmin), slog.Int64("backlog", backlog))
	b.add("bloat", fmt.Sprintf("period %d/%d (%s–%s), snapshot %s", k, bloatPeriods, clock(from), clock(to), phase),
		fmt.Sprintf("%s; claim p99 %s; tasks: %d dead / %d live tuples, %.0f MB, %d autovacuums; claim index %s; xmin age %d; backlog %d",
			perSec(rate), claims.p99(), ts.Dead, ts.Live, float64(ts.Bytes)/1e6, ts.AutoVacuums, index, xmin, backlog), "", "")
	return nil
}

// bloatBaseline is the load before the snapshot.
type bloatBaseline struct {
	rate float64 // tasks/s
	dead int64   // highest n_dead_tup of tasks
}

func bloatBefore(samples []bloatSample, holdAt time.Duration) bloatBaseline {
	var b bloatBaseline
	var last bloatSample
	for _, s := range samples {
		if s.at > holdAt {
			break
		}
		b.dead = max(b.dead, s.dead)
		last = s
	}
	if last.at > 0 {
		b.rate = float64(last.done) / last.at.Seconds()
	}
	return b
}

// recovery is when, after the release, throughput and dead tuples came
// back.
type recovery struct {
	rateAt, deadAt time.Duration // since the release
	rateOK, deadOK bool
	done           bool
}

func (r recovery) at() time.Duration { return max(r.rateAt, r.deadAt) }

// bloatRecovered finds, in the samples after the release, the first
// second whose trailing throughput is back to bloatRecoverRate of the
// rate before the snapshot, and the first whose dead tuples of tasks are
// down to their peak before it.
func bloatRecovered(samples []bloatSample, holdAt, releaseAt time.Duration) recovery {
	var r recovery
	if releaseAt == 0 {
		return r
	}
	before := bloatBefore(samples, holdAt)
	for i, s := range samples {
		if s.at < releaseAt {
			continue
		}
		if !r.rateOK && i >= bloatWindow {
			w := samples[i-bloatWindow]
			if float64(s.done-w.done)/(s.at-w.at).Seconds() >= bloatRecoverRate*before.rate {
				r.rateAt, r.rateOK = s.at-releaseAt, true
			}
		}
		if !r.deadOK && s.dead <= before.dead {
			r.deadAt, r.deadOK = s.at-releaseAt, true
		}
	}
	r.done = r.rateOK && r.deadOK
	return r
}

func sinceRelease(d time.Duration, ok bool) string {
	if !ok {
		return "not yet"
	}
	return "after " + d.Round(time.Second).String()
}

// clock formats d as m:ss.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// startFiller enqueues runs of workflow whenever fewer than backlog of
// them wait (sent minus done): the engine runs at full speed, as River's
// bench does.
func (b *bench) startFiller(ctx context.Context, eng *engine.Engine, workflow string, input func(i int64) any, done *atomic.Int64, backlog int64) *producer {
	return b.startLoad(ctx, eng, workflow, "filler", int64(max(b.o.enqBatch, 1)), input, func(_ time.Time, sent int64) int64 {
		return backlog - (sent - done.Load())
	})
}
