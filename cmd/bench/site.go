package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/store/benchdb"
)

// site seeds a large history with SQL and times the admin site's reads.
func (b *bench) site(ctx context.Context) error {
	s, drop, err := b.newDB(ctx, "site")
	if err != nil {
		return err
	}
	defer drop()
	start := time.Now()
	b.log.Info("seeding", "tasks", b.o.siteTasks)
	runs, tasks, events, err := s.q.Seed(ctx, benchdb.SeedParams{Tasks: b.o.siteTasks, TasksPerRun: 5, Span: 7 * 24 * time.Hour})
	if err != nil {
		return err
	}
	b.add("site", "seed with SQL (+ VACUUM ANALYZE)", fmt.Sprintf("%d runs, %d tasks, %d events in %s", runs, tasks, events,
		time.Since(start).Round(time.Second)), "", "")
	queries, source, err := b.siteQueries(ctx, s)
	if err != nil {
		return err
	}
	b.add("site", "queries timed", source, "", "")
	for _, q := range queries {
		for range 3 { // warm-up
			if err := q.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", q.name, err)
			}
		}
		var lat []time.Duration
		for range max(b.o.siteRuns, 1) {
			t0 := time.Now()
			if err := q.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", q.name, err)
			}
			lat = append(lat, time.Since(t0))
		}
		p50, p95, _ := percentiles(lat)
		b.check("site", q.name+" p50 / p95", ms(p50)+" / "+ms(p95), "p95 < 100 ms", p95 < 100*time.Millisecond)
	}
	return nil
}
