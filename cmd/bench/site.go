package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/cairnhq/cairn/cmd/internal/benchdb"
	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
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
	return b.sitePages(ctx, s)
}

// sitePages times whole pages as the site serves them (every query of
// the page, rendering, no cache: a new server for each request, since the
// overview keeps its reads for 2 s).
func (b *bench) sitePages(ctx context.Context, s *scratch) error {
	eng, err := engine.New(s.sql, engine.Config{Schema: schema, NoWorker: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	reads, err := store.New(s.sql, schema)
	if err != nil {
		return err
	}
	get := func(path string) error {
		site, err := web.New(web.Config{Engine: eng, Reads: reads, Logger: slog.New(slog.DiscardHandler), ListenAddr: "127.0.0.1:0"})
		if err != nil {
			return err
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		req.RemoteAddr = "127.0.0.1:40000"
		rec := httptest.NewRecorder()
		site.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", path, rec.Code, rec.Body.String())
		}
		return nil
	}
	for _, path := range []string{"/", "/runs", "/queues", "/runs/1"} {
		for range 2 { // warm-up
			if err := get(path); err != nil {
				return err
			}
		}
		var lat []time.Duration
		for range max(b.o.siteRuns, 1) {
			t0 := time.Now()
			if err := get(path); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		p50, p95, _ := percentiles(lat)
		b.check("site", "page GET "+path+" (uncached) p50 / p95", ms(p50)+" / "+ms(p95), "p95 < 100 ms", p95 < 100*time.Millisecond)
	}
	return nil
}
