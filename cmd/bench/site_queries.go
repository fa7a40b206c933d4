package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnhq/cairn/store"
)

// siteQuery is one read of the admin site, timed repeatedly.
type siteQuery struct {
	name string
	run  func(ctx context.Context) error
}

// siteQueries returns the store's site reads (store/site.go) the way the
// overview and runs pages call them.
func (b *bench) siteQueries(ctx context.Context, s *scratch) ([]siteQuery, string, error) {
	st, err := store.New(s.sql, schema)
	if err != nil {
		return nil, "", err
	}
	smp, err := s.q.PickSample(ctx)
	if err != nil {
		return nil, "", err
	}
	list := func(p store.RunListParams) func(context.Context) error {
		return func(ctx context.Context) error { _, err := st.RunListFiltered(ctx, &p); return err }
	}
	return []siteQuery{
		{"overview: TaskCountsByState", func(ctx context.Context) error { _, err := st.TaskCountsByState(ctx); return err }},
		{"overview: ThroughputPerMinute (last hour)", func(ctx context.Context) error {
			now := time.Now()
			_, err := st.ThroughputPerMinute(ctx, now.Add(-time.Hour), now)
			return err
		}},
		{"overview: TaskBreakdown (last hour, 5-minute buckets)", func(ctx context.Context) error {
			now := time.Now()
			_, err := st.TaskBreakdown(ctx, store.BreakdownParams{Since: now.Add(-time.Hour), Until: now,
				Bucket: 5 * time.Minute, DeferSince: now.Add(-15 * time.Minute)})
			return err
		}},
		{"overview: UnroutableList", func(ctx context.Context) error { _, err := st.UnroutableList(ctx); return err }},
		{"overview: WorkerSlotList", func(ctx context.Context) error { _, err := st.WorkerSlotList(ctx, 100); return err }},
		{"overview: QueueDepthList", func(ctx context.Context) error { _, err := st.QueueDepthList(ctx); return err }},
		{"queues: FlowHoldList", func(ctx context.Context) error { _, _, err := st.FlowHoldList(ctx, 20); return err }},
		{"runs: RunListFiltered first page", list(store.RunListParams{})},
		{"runs: RunListFiltered status=failed", list(store.RunListParams{Statuses: []string{"failed"}})},
		{"runs: RunListFiltered workflow=wf_3", list(store.RunListParams{Workflow: "wf_3"})},
		{"runs: RunListFiltered input @> {n}", list(store.RunListParams{InputMatch: [][]json.RawMessage{{json.RawMessage(`{"n": 4242}`)}}})},
		{"runs: RunListFiltered deep keyset page (75%)", list(store.RunListParams{After: &store.RunCursor{CreatedAt: smp.CursorAt, ID: smp.CursorID}})},
		{"runs: RunCountFiltered (up to 10000)", func(ctx context.Context) error {
			_, err := st.RunCountFiltered(ctx, &store.RunListParams{}, 10000)
			return err
		}},
		{"run: TaskListByRun + EventListByRunRecent", func(ctx context.Context) error {
			if _, err := st.TaskListByRun(ctx, smp.RunID); err != nil {
				return err
			}
			_, err := st.EventListByRunRecent(ctx, smp.RunID, 200)
			return err
		}},
		{"task: TaskAttemptList + TaskDepList", func(ctx context.Context) error {
			if _, err := st.TaskAttemptList(ctx, smp.TaskID); err != nil {
				return err
			}
			_, err := st.TaskDepList(ctx, smp.TaskID)
			return err
		}},
		{"task: TaskWaitGet", func(ctx context.Context) error { _, err := st.TaskWaitGet(ctx, smp.TaskID); return err }},
	}, "the store's site queries (store/site.go)", nil
}
