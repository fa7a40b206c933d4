package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// fakeClock is a Config.Clock that moves only when the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

const tickWorkflow = "tick"

func scheduledNoop(context.Context, *engine.TaskHandle) error { return nil }

// schedEnv is an engine that is never started: tests drive its scheduler
// with SchedulerRunOnce and move its fake clock.
type schedEnv struct {
	env
	clk *fakeClock
}

func setupSched(t *testing.T, at time.Time, mutate func(*engine.Config)) schedEnv {
	t.Helper()
	clk := newFakeClock(at)
	e := setup(t, func(cfg *engine.Config) {
		cfg.Clock = clk.Now
		cfg.WorkerName = "a"
		if mutate != nil {
			mutate(cfg)
		}
	})
	registerTick(t, e.eng)
	return schedEnv{env: e, clk: clk}
}

func registerTick(t *testing.T, eng *engine.Engine) {
	t.Helper()
	require.NoError(t, eng.Register(engine.Workflow{Name: tickWorkflow, Tasks: []engine.Task{{Name: "t", Run: scheduledNoop}}}))
}

// peer is a second engine on the same database and clock.
func (s schedEnv) peer(t *testing.T, name string, mutate func(*engine.Config)) *engine.Engine {
	t.Helper()
	cfg := fastConfig(s.db, t)
	cfg.Clock = s.clk.Now
	cfg.WorkerName = name
	if mutate != nil {
		mutate(&cfg)
	}
	eng := newEngine(t, s.db, cfg)
	registerTick(t, eng)
	return eng
}

// scheduledKeys returns the idempotency keys of the runs of schedules, sorted.
func scheduledKeys(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.SQL.Query(`SELECT idempotency_key FROM cairn.runs WHERE idempotency_key LIKE 'schedule:%' ORDER BY idempotency_key`)
	require.NoError(t, err)
	defer rows.Close()
	keys := []string{}
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	return keys
}

func fireKey(id int64, at time.Time) string {
	return fmt.Sprintf("schedule:%d:%s", id, at.UTC().Format(time.RFC3339))
}

func runOnce(t *testing.T, eng *engine.Engine) {
	t.Helper()
	require.NoError(t, eng.SchedulerRunOnce(context.Background()))
}

func getSchedule(t *testing.T, st *store.Store, name string) *store.Schedule {
	t.Helper()
	sc, err := st.ScheduleGet(context.Background(), name)
	require.NoError(t, err)
	return sc
}

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	return loc
}

func TestScheduleNextFiresDST(t *testing.T) {
	t.Parallel()
	loc := berlin(t)
	at := func(day, month, hour, min int) time.Time {
		return time.Date(2026, time.Month(month), day, hour, min, 0, 0, loc)
	}
	raw, err := cron.ParseStandard("30 2 * * *")
	require.NoError(t, err)

	t.Run("spring forward", func(t *testing.T) {
		// On 2026-03-29 Berlin jumps from 02:00 CET to 03:00 CEST: 02:30
		// does not exist. robfig/cron skips the day...
		require.Equal(t, at(30, 3, 2, 30), raw.Next(at(28, 3, 2, 30).In(loc)))
		// ...Cairn fires once, at the end of the gap.
		got, err := engine.NextFires("30 2 * * *", "Europe/Berlin", at(28, 3, 0, 0), 3)
		require.NoError(t, err)
		require.Equal(t, []time.Time{at(28, 3, 2, 30), at(29, 3, 3, 0), at(30, 3, 2, 30)}, got)
		require.Equal(t, "2026-03-29T01:00:00Z", got[1].UTC().Format(time.RFC3339))
	})
	t.Run("fall back", func(t *testing.T) {
		// On 2026-10-25 Berlin goes from 03:00 CEST back to 02:00 CET: 02:30
		// happens twice. robfig/cron fires at both...
		first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC) // 02:30 CEST
		require.Equal(t, first.Add(time.Hour), raw.Next(first.In(loc)).UTC())
		// ...Cairn at the first only.
		got, err := engine.NextFires("30 2 * * *", "Europe/Berlin", at(24, 10, 0, 0), 3)
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, first, got[1].UTC())
		for i, day := range []int{24, 25, 26} {
			require.Equal(t, day, got[i].Day())
			require.Equal(t, 2, got[i].Hour())
			require.Equal(t, 30, got[i].Minute())
		}
	})
	t.Run("hour wildcard keeps its pace", func(t *testing.T) {
		start := time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC) // 01:45 CEST
		got, err := engine.NextFires("*/30 * * * *", "Europe/Berlin", start, 6)
		require.NoError(t, err)
		for i, g := range got {
			require.Equal(t, start.Add(15*time.Minute+time.Duration(i)*30*time.Minute), g.UTC(), "fire %d", i)
		}
	})
	t.Run("every 90s", func(t *testing.T) {
		start := at(29, 3, 1, 58) // across the gap too: @every is absolute
		got, err := engine.NextFires("@every 90s", "Europe/Berlin", start, 5)
		require.NoError(t, err)
		require.Len(t, got, 5)
		for i, g := range got {
			require.Equal(t, start.Add(time.Duration(i+1)*90*time.Second), g)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := engine.NextFires("* *", "UTC", at(1, 1, 0, 0), 5)
		require.ErrorIs(t, err, engine.ErrInvalidSchedule)
		_, err = engine.NextFires("@daily", "Nowhere/Atlantis", at(1, 1, 0, 0), 5)
		require.ErrorIs(t, err, engine.ErrInvalidSchedule)
	})
}

// TestScheduleFiresOncePerDayAcrossDST drives a daily 02:30 Berlin job
// through both changes of 2026, ticking half an hour before each fire and
// at it.
func TestScheduleFiresOncePerDayAcrossDST(t *testing.T) {
	t.Parallel()
	loc := berlin(t)
	for name, tc := range map[string]struct {
		from, to time.Time
		want     []string // fire times, UTC
	}{
		"spring forward": {
			from: time.Date(2026, 3, 28, 0, 0, 0, 0, loc), to: time.Date(2026, 3, 30, 12, 0, 0, 0, loc),
			want: []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		"fall back": {
			from: time.Date(2026, 10, 24, 0, 0, 0, 0, loc), to: time.Date(2026, 10, 26, 12, 0, 0, 0, loc),
			want: []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := setupSched(t, tc.from, nil)
			ctx := context.Background()
			require.NoError(t, s.eng.CreateSchedule(ctx, engine.Schedule{Name: "nightly", Expression: "30 2 * * *",
				Timezone: "Europe/Berlin", Workflow: tickWorkflow}))
			id := getSchedule(t, s.st, "nightly").ID
			for {
				next := getSchedule(t, s.st, "nightly").NextFireAt
				if next.After(tc.to) {
					break
				}
				before := len(scheduledKeys(t, s.db))
				s.clk.Set(next.Add(-30 * time.Minute))
				runOnce(t, s.eng)
				require.Len(t, scheduledKeys(t, s.db), before, "fired early")
				s.clk.Set(next)
				runOnce(t, s.eng)
				require.Len(t, scheduledKeys(t, s.db), before+1, "did not fire at %s", next)
			}
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				at, err := time.Parse(time.RFC3339, w)
				require.NoError(t, err)
				want[i] = fireKey(id, at)
			}
			require.Equal(t, want, scheduledKeys(t, s.db))
		})
	}
}

// TestScheduleCatchUp simulates three hours and five minutes without an
// engine: 18 fires of an every-ten-minutes schedule were missed.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		policy string
		max    int
		want   int // runs fired after the outage
	}{
		{engine.CatchUpSkip, 0, 0},
		{engine.CatchUpOne, 0, 1},
		{engine.CatchUpAll, 0, 18},
		{engine.CatchUpAll, 5, 5},
	}
	for _, expr := range []string{"*/10 * * * *", "@every 10m"} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s/%d", expr, tc.policy, tc.max), func(t *testing.T) {
				t.Parallel()
				s := setupSched(t, t0, nil)
				ctx := context.Background()
				require.NoError(t, s.eng.CreateSchedule(ctx, engine.Schedule{Name: "ten", Expression: expr,
					Workflow: tickWorkflow, CatchUp: tc.policy, MaxCatchUp: tc.max}))
				sc := getSchedule(t, s.st, "ten")
				require.Equal(t, t0.Add(10*time.Minute), sc.NextFireAt.UTC())

				now := s.clk.Add(3*time.Hour + 5*time.Minute)
				runOnce(t, s.eng)
				keys := scheduledKeys(t, s.db)
				require.Len(t, keys, tc.want)
				var want []string
				for i := 18 - tc.want + 1; i <= 18; i++ { // the most recent ones
					want = append(want, fireKey(sc.ID, t0.Add(time.Duration(i)*10*time.Minute)))
				}
				require.ElementsMatch(t, want, keys)

				sc = getSchedule(t, s.st, "ten")
				require.True(t, sc.NextFireAt.After(now), "next fire %s must be after now %s", sc.NextFireAt, now)
				require.Equal(t, t0.Add(190*time.Minute), sc.NextFireAt.UTC())
				if tc.want > 0 {
					require.Equal(t, t0.Add(180*time.Minute), sc.LastFireAt.UTC())
					require.NotNil(t, sc.LastRunID)
				} else {
					require.Nil(t, sc.LastFireAt)
				}

				// Back to normal: the next fire, on time, fires under every policy.
				s.clk.Set(t0.Add(190 * time.Minute))
				runOnce(t, s.eng)
				require.Len(t, scheduledKeys(t, s.db), tc.want+1)
				runOnce(t, s.eng) // and only once
				require.Len(t, scheduledKeys(t, s.db), tc.want+1)
			})
		}
	}
}

// TestScheduleTwoEnginesNeverDoubleFire ticks two engines on one database
// for 50 minutes of a every-minute schedule, each both through the lease
// and as a self-appointed leader, concurrently.
func TestScheduleTwoEnginesNeverDoubleFire(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
	s := setupSched(t, t0, nil)
	b := s.peer(t, "b", nil)
	ctx := context.Background()
	require.NoError(t, s.eng.CreateSchedule(ctx, engine.Schedule{Name: "minutely", Expression: "* * * * *",
		Workflow: tickWorkflow, CatchUp: engine.CatchUpAll}))
	id := getSchedule(t, s.st, "minutely").ID

	var want []string
	for i := 1; i <= 50; i++ {
		s.clk.Add(time.Minute)
		want = append(want, fireKey(id, t0.Add(time.Duration(i)*time.Minute)))
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for _, eng := range []*engine.Engine{s.eng, b, s.eng, b} {
			wg.Go(func() { errs <- eng.SchedulerRunOnce(ctx) })
			wg.Go(func() { errs <- eng.SchedulerFireDueAsLeader(ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	require.Equal(t, want, scheduledKeys(t, s.db)) // sorted keys; RFC 3339 UTC sorts by time
	var runs, distinct int
	require.NoError(t, s.db.SQL.QueryRow(`SELECT count(*), count(DISTINCT idempotency_key) FROM cairn.runs`).Scan(&runs, &distinct))
	require.Equal(t, 50, runs)
	require.Equal(t, 50, distinct)
}

func TestScheduleLeaderHandover(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
	lease := func(cfg *engine.Config) { cfg.LeaderLease = 5 * time.Minute }
	s := setupSched(t, t0, lease)
	b := s.peer(t, "b", lease)
	ctx := context.Background()
	require.NoError(t, s.eng.CreateSchedule(ctx, engine.Schedule{Name: "minutely", Expression: "* * * * *",
		Workflow: tickWorkflow, CatchUp: engine.CatchUpAll}))
	id := getSchedule(t, s.st, "minutely").ID
	holder := func() string {
		l, err := s.st.LeaseGet(ctx, "scheduler")
		require.NoError(t, err)
		return l.Holder
	}

	// A leads and fires; B finds the lease taken.
	s.clk.Add(time.Minute)
	runOnce(t, s.eng)
	runOnce(t, b)
	require.Equal(t, s.eng.SchedulerHolder(), holder())
	require.Equal(t, []string{fireKey(id, t0.Add(time.Minute))}, scheduledKeys(t, s.db))

	// A dies without releasing the lease: B waits for it to expire...
	for range 5 {
		s.clk.Add(time.Minute)
		runOnce(t, b)
		require.Len(t, scheduledKeys(t, s.db), 1, "B fired while A's lease was valid")
	}
	// ...then takes over and catches up on everything A missed.
	s.clk.Add(time.Minute) // t0+7m: A's lease (t0+1m + 5m) has expired
	runOnce(t, b)
	require.Equal(t, b.SchedulerHolder(), holder())
	var want []string
	for i := 1; i <= 7; i++ {
		want = append(want, fireKey(id, t0.Add(time.Duration(i)*time.Minute)))
	}
	require.Equal(t, want, scheduledKeys(t, s.db))

	// A comes back: B's lease is valid, A stays a follower.
	s.clk.Add(time.Minute)
	runOnce(t, s.eng)
	require.Len(t, scheduledKeys(t, s.db), 7)
	require.Equal(t, b.SchedulerHolder(), holder())

	// A graceful stop releases the lease: A takes over at once.
	require.NoError(t, b.SchedulerStop(ctx))
	_, err := s.st.LeaseGet(ctx, "scheduler")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, b.SchedulerStop(ctx)) // safe twice
	runOnce(t, s.eng)
	require.Equal(t, s.eng.SchedulerHolder(), holder())
	require.Len(t, scheduledKeys(t, s.db), 8)
}

func TestSchedulePauseResumeAndFireNow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	s := setupSched(t, t0, nil)
	ctx := context.Background()
	require.NoError(t, s.eng.CreateSchedule(ctx, engine.Schedule{Name: "ten", Expression: "*/10 * * * *",
		Workflow: tickWorkflow, Input: map[string]int{"n": 1}, CatchUp: engine.CatchUpAll}))
	id := getSchedule(t, s.st, "ten").ID

	require.NoError(t, s.eng.PauseSchedule(ctx, "ten"))
	require.True(t, getSchedule(t, s.st, "ten").Paused)
	s.clk.Set(t0.Add(10 * time.Minute))
	runOnce(t, s.eng)
	require.Empty(t, scheduledKeys(t, s.db), "a paused schedule fired")

	// Fire now works while paused and leaves next_fire_at alone.
	s.clk.Set(t0.Add(15 * time.Minute))
	run, err := s.eng.FireSchedule(ctx, "ten")
	require.NoError(t, err)
	manual := fmt.Sprintf("schedule:%d:manual:%d", id, t0.Add(15*time.Minute).UnixNano())
	require.Equal(t, []string{manual}, scheduledKeys(t, s.db))
	r, err := s.st.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, manual, *r.IdempotencyKey)
	require.JSONEq(t, `{"n":1}`, string(r.Input))
	sc := getSchedule(t, s.st, "ten")
	require.Equal(t, t0.Add(10*time.Minute), sc.NextFireAt.UTC())
	require.Equal(t, run.ID, *sc.LastRunID)
	require.Equal(t, t0.Add(15*time.Minute), sc.LastFireAt.UTC())

	// Two hours later: resuming computes the next fire from now, with no
	// storm of the twelve fires missed while paused (catch-up "all").
	s.clk.Set(t0.Add(2*time.Hour + 3*time.Minute))
	require.NoError(t, s.eng.ResumeSchedule(ctx, "ten"))
	sc = getSchedule(t, s.st, "ten")
	require.False(t, sc.Paused)
	require.Equal(t, t0.Add(2*time.Hour+10*time.Minute), sc.NextFireAt.UTC())
	runOnce(t, s.eng)
	require.Len(t, scheduledKeys(t, s.db), 1)
	// Resuming a running schedule changes nothing.
	require.NoError(t, s.eng.ResumeSchedule(ctx, "ten"))
	require.Equal(t, sc.NextFireAt, getSchedule(t, s.st, "ten").NextFireAt)

	s.clk.Set(t0.Add(2*time.Hour + 10*time.Minute))
	runOnce(t, s.eng)
	require.Contains(t, scheduledKeys(t, s.db), fireKey(id, t0.Add(2*time.Hour+10*time.Minute)))
	require.Len(t, scheduledKeys(t, s.db), 2)

	require.NoError(t, s.eng.DeleteSchedule(ctx, "ten"))
	_, err = s.st.ScheduleGet(ctx, "ten")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestScheduleUnknownNameIsNotFound(t *testing.T) {
	t.Parallel()
	s := setupSched(t, time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC), nil)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"pause":  func() error { return s.eng.PauseSchedule(ctx, "nope") },
		"resume": func() error { return s.eng.ResumeSchedule(ctx, "nope") },
		"fire":   func() error { _, err := s.eng.FireSchedule(ctx, "nope"); return err },
		"delete": func() error { return s.eng.DeleteSchedule(ctx, "nope") },
		"update": func() error {
			return s.eng.UpdateSchedule(ctx, engine.Schedule{Name: "nope", Expression: "@daily", Workflow: tickWorkflow})
		},
	} {
		err := call()
		require.ErrorIs(t, err, engine.ErrNotFound, name)
		require.Contains(t, err.Error(), `"nope"`, name)
	}
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	s := setupSched(t, time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC), nil)
	ctx := context.Background()
	good := engine.Schedule{Name: "nightly", Expression: "0 3 * * *", Timezone: "Europe/Berlin", Workflow: tickWorkflow}
	cases := []struct {
		field  string
		mutate func(*engine.Schedule)
		cause  error
	}{
		{"expression", func(s *engine.Schedule) { s.Expression = "* *" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "61 * * * *" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "0 0 * * * *" }, nil}, // 6 fields
		{"expression", func(s *engine.Schedule) { s.Expression = "" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "TZ=UTC" }, nil}, // panics inside robfig/cron
		{"expression", func(s *engine.Schedule) { s.Expression = "CRON_TZ=Europe/Berlin 0 3 * * *" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "@every 0s" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "@every 1500ms" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "@fortnightly" }, nil},
		{"expression", func(s *engine.Schedule) { s.Expression = "0 0 30 2 *" }, nil}, // never
		{"timezone", func(s *engine.Schedule) { s.Timezone = "Mars/Olympus_Mons" }, nil},
		{"timezone", func(s *engine.Schedule) { s.Timezone = "Local" }, nil},
		{"workflow", func(s *engine.Schedule) { s.Workflow = "nope" }, engine.ErrUnknownWorkflow},
		{"input", func(s *engine.Schedule) { s.Input = []int{1} }, engine.ErrInvalidInput},
		{"input", func(s *engine.Schedule) { s.Input = "{oops" }, engine.ErrInvalidInput},
		{"catch_up", func(s *engine.Schedule) { s.CatchUp = "some" }, nil},
		{"max_catch_up", func(s *engine.Schedule) { s.MaxCatchUp = -1 }, nil},
		{"name", func(s *engine.Schedule) { s.Name = "" }, nil},
		{"name", func(s *engine.Schedule) { s.Name = "has space" }, nil},
	}
	for _, tc := range cases {
		sc := good
		tc.mutate(&sc)
		for op, call := range map[string]func(engine.Schedule) error{
			"create": func(s2 engine.Schedule) error { return s.eng.CreateSchedule(ctx, s2) },
			"upsert": func(s2 engine.Schedule) error { return s.eng.UpsertSchedule(ctx, s2) },
		} {
			err := call(sc)
			what := fmt.Sprintf("%s %s %+v", op, tc.field, sc)
			require.ErrorIs(t, err, engine.ErrInvalidSchedule, what)
			var se *engine.ScheduleError
			require.True(t, errors.As(err, &se), what)
			require.Equal(t, tc.field, se.Field, what)
			require.Contains(t, err.Error(), tc.field, what)
			if tc.cause != nil {
				require.ErrorIs(t, err, tc.cause, what)
			}
		}
	}
	err := s.eng.CreateSchedule(ctx, engine.Schedule{Name: "nightly", Expression: "* *", Workflow: tickWorkflow})
	require.True(t, strings.HasPrefix(err.Error(), `invalid schedule "nightly": expression "* *": `), err.Error())
	_, err = engine.NextFires("0 3 * * *", "Mars/Olympus_Mons", time.Now(), 1)
	require.EqualError(t, err, `invalid schedule: timezone "Mars/Olympus_Mons": unknown IANA time zone`)

	all, err := s.st.ScheduleList(ctx)
	require.NoError(t, err)
	require.Empty(t, all, "nothing is stored on error")

	// A taken name.
	require.NoError(t, s.eng.CreateSchedule(ctx, good))
	other := good
	other.Expression = "@hourly"
	require.ErrorIs(t, s.eng.CreateSchedule(ctx, other), engine.ErrScheduleExists)
	require.Equal(t, "0 3 * * *", getSchedule(t, s.st, "nightly").Expression)
	// An invalid update leaves the schedule as it was.
	other.Expression = "* *"
	require.ErrorIs(t, s.eng.UpdateSchedule(ctx, other), engine.ErrInvalidSchedule)
	require.Equal(t, "0 3 * * *", getSchedule(t, s.st, "nightly").Expression)
}

func TestScheduleUpsertAndUpdate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	nightly := engine.Schedule{Name: "nightly", Expression: "0 3 * * *", Timezone: "Europe/Berlin", Workflow: tickWorkflow,
		Input: map[string]string{"v": "1"}}
	e := setup(t, func(cfg *engine.Config) {
		cfg.Clock = clk.Now
		cfg.SchedulerInterval = time.Hour // its first tick finds nothing due; tests tick by hand
		cfg.Schedules = []engine.Schedule{nightly}
	})
	registerTick(t, e.eng)
	start(t, e.eng)
	ctx := context.Background()
	sc := getSchedule(t, e.st, "nightly")
	require.Equal(t, time.Date(2026, 1, 6, 2, 0, 0, 0, time.UTC), sc.NextFireAt.UTC()) // 03:00 CET
	require.Equal(t, engine.CatchUpSkip, sc.CatchUp)
	require.Equal(t, engine.DefaultMaxCatchUp, sc.MaxCatchUp)
	require.JSONEq(t, `{"v":"1"}`, string(sc.Input))

	// Later, the schedule is paused and fired by hand; a redeploy upserts
	// it with a new input: both are kept, the next fire too.
	clk.Set(t0.Add(5 * time.Hour))
	require.NoError(t, e.eng.PauseSchedule(ctx, "nightly"))
	run, err := e.eng.FireSchedule(ctx, "nightly")
	require.NoError(t, err)
	nightly.Input = map[string]string{"v": "2"}
	nightly.CatchUp = engine.CatchUpOne
	require.NoError(t, e.eng.UpsertSchedule(ctx, nightly))
	up := getSchedule(t, e.st, "nightly")
	require.True(t, up.Paused)
	require.Equal(t, sc.NextFireAt, up.NextFireAt)
	require.Equal(t, run.ID, *up.LastRunID)
	require.Equal(t, engine.CatchUpOne, up.CatchUp)
	require.JSONEq(t, `{"v":"2"}`, string(up.Input))

	// A new expression recomputes the next fire from now.
	nightly.Expression = "0 4 * * *"
	require.NoError(t, e.eng.UpdateSchedule(ctx, nightly))
	up = getSchedule(t, e.st, "nightly")
	require.Equal(t, time.Date(2026, 1, 6, 3, 0, 0, 0, time.UTC), up.NextFireAt.UTC())
	require.True(t, up.Paused)
	// So does a new zone.
	nightly.Timezone = "UTC"
	require.NoError(t, e.eng.UpsertSchedule(ctx, nightly))
	require.Equal(t, time.Date(2026, 1, 6, 4, 0, 0, 0, time.UTC), getSchedule(t, e.st, "nightly").NextFireAt.UTC())

	// Upsert creates what does not exist, paused if asked.
	require.NoError(t, e.eng.UpsertSchedule(ctx, engine.Schedule{Name: "hourly", Expression: "@hourly", Workflow: tickWorkflow, Paused: true}))
	require.True(t, getSchedule(t, e.st, "hourly").Paused)

	// Start rejects bad Config.Schedules and stores none of them.
	bad := newEngine(t, e.db, engine.Config{Clock: clk.Now, Logger: testLogger(t), Schedules: []engine.Schedule{
		{Name: "fine", Expression: "@daily", Workflow: tickWorkflow},
		{Name: "broken", Expression: "@daily", Workflow: "unregistered"},
	}})
	registerTick(t, bad)
	err = bad.Start(ctx)
	require.ErrorIs(t, err, engine.ErrInvalidSchedule)
	require.ErrorIs(t, err, engine.ErrUnknownWorkflow)
	require.Contains(t, err.Error(), "Schedules[1]")
	_, err = e.st.ScheduleGet(ctx, "fine")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A schedule of Config.Schedules edited on the site (UpdateSchedule) keeps
// the edit across restarts with the same config; a restart whose config
// changed the definition applies it.
func TestConfigSchedulesKeepSiteEditsUntilTheConfigChanges(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	clk := newFakeClock(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	startWith := func(s engine.Schedule) {
		t.Helper()
		eng := newEngine(t, db, engine.Config{Clock: clk.Now, Logger: testLogger(t), NoWorker: true,
			SchedulerInterval: time.Hour, Schedules: []engine.Schedule{s}})
		registerTick(t, eng)
		require.NoError(t, eng.Start(ctx))
		require.NoError(t, eng.Shutdown(ctx))
	}
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	inCode := engine.Schedule{Name: "report", Expression: "0 3 * * *", Workflow: tickWorkflow}
	startWith(inCode)
	require.Equal(t, "0 3 * * *", getSchedule(t, st, "report").Expression)

	// An admin moves it on the site; restarts with the same code keep that.
	admin := newEngine(t, db, engine.Config{Clock: clk.Now, Logger: testLogger(t), NoWorker: true})
	registerTick(t, admin)
	edited := inCode
	edited.Expression = "0 5 * * *"
	require.NoError(t, admin.UpdateSchedule(ctx, edited))
	startWith(inCode)
	startWith(inCode)
	require.Equal(t, "0 5 * * *", getSchedule(t, st, "report").Expression, "the site's edit survives a restart")

	// The code's definition changes: the next start applies it.
	inCode.Expression = "0 4 * * *"
	startWith(inCode)
	require.Equal(t, "0 4 * * *", getSchedule(t, st, "report").Expression, "a changed config wins")
}
