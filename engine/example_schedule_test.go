package engine_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// Schedules given in Config are created or updated at Start; the rest of
// the API manages schedules at run time.
func Example_schedules() {
	var db *sql.DB // a lib/pq pool
	report := func(ctx context.Context, t *engine.TaskHandle) error { return nil }

	eng, err := engine.New(db, engine.Config{
		Schedules: []engine.Schedule{{
			Name:       "nightly-report",
			Expression: "30 2 * * *",    // 02:30 every day...
			Timezone:   "Europe/Berlin", // ...Berlin time
			Workflow:   "report",
			Input:      map[string]string{"format": "pdf"},
			CatchUp:    engine.CatchUpOne, // after an outage, one run for all missed fires
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := eng.Register(engine.Workflow{Name: "report", Tasks: []engine.Task{{Name: "build", Run: report}}}); err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := eng.Start(ctx); err != nil {
		panic(err)
	}
	defer eng.Shutdown(ctx) //nolint:errcheck

	err = eng.CreateSchedule(ctx, engine.Schedule{Name: "heartbeat", Expression: "@every 90s", Workflow: "report"})
	if err != nil {
		panic(err) // errors.Is(err, engine.ErrInvalidSchedule), engine.ErrScheduleExists
	}
	_ = eng.PauseSchedule(ctx, "heartbeat")
	_ = eng.ResumeSchedule(ctx, "heartbeat") // next fire counted from now
	run, _ := eng.FireSchedule(ctx, "nightly-report")
	fmt.Println("fired run", run.ID)
	_ = eng.DeleteSchedule(ctx, "heartbeat")
}

func ExampleNextFires() {
	// 2026-03-29: Berlin skips from 02:00 to 03:00, so that day's 02:30
	// fire runs at 03:00.
	after := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)
	fires, err := engine.NextFires("30 2 * * *", "Europe/Berlin", after, 4)
	if err != nil {
		panic(err)
	}
	for _, f := range fires {
		fmt.Println(f.Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// Sat 2026-03-28 02:30 CET
	// Sun 2026-03-29 03:00 CEST
	// Mon 2026-03-30 02:30 CEST
	// Tue 2026-03-31 02:30 CEST
}
