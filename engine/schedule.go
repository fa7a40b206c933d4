package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // schedules name IANA zones; work where the OS has no zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/cairnhq/cairn/store"
)

// Catch-up policies: what a schedule does with fires missed while no
// engine ran (or while it was the leader's turn and none was).
const (
	// CatchUpSkip drops missed fires. A fire is missed when it is later
	// than the skip tolerance: max(1 minute, 2×Config.SchedulerInterval).
	// Only the most recent due fire can be on time; it fires, the rest do
	// not, and next_fire_at moves to the first fire after now.
	CatchUpSkip = "skip"
	// CatchUpOne fires once for all the due fires together, with the
	// most recent due fire time.
	CatchUpOne = "one"
	// CatchUpAll fires every due fire, up to Schedule.MaxCatchUp of them
	// (the most recent ones).
	CatchUpAll = "all"
)

const (
	// DefaultMaxCatchUp is the default bound of CatchUpAll.
	DefaultMaxCatchUp = 100
	// MaxMaxCatchUp is the largest accepted Schedule.MaxCatchUp.
	MaxMaxCatchUp = 10000
	// schedulerLease names the scheduler's row in the leases table.
	schedulerLease = "scheduler"
	// minSkipTolerance is the smallest lateness that makes a fire missed.
	minSkipTolerance = time.Minute
	// dueBatch is how many due schedules one query fetches.
	dueBatch = 100
)

// ErrInvalidSchedule: a schedule failed validation. The error is a
// *ScheduleError naming the field.
var ErrInvalidSchedule = errors.New("invalid schedule")

// ErrScheduleExists: CreateSchedule was given a name that is taken.
var ErrScheduleExists = errors.New("schedule already exists")

// ScheduleError is the error of a schedule that failed validation. It
// matches ErrInvalidSchedule and its cause (such as ErrUnknownWorkflow or
// ErrInvalidInput) with errors.Is.
type ScheduleError struct {
	// Name is the schedule's name ("" from NextFires).
	Name string
	// Field is the bad field: "name", "expression", "timezone",
	// "workflow", "input", "catch_up" or "max_catch_up".
	Field string
	// Value is the bad value as given ("" for input).
	Value string
	// Err says what is wrong with it.
	Err error
}

func (e *ScheduleError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidSchedule.Error())
	if e.Name != "" {
		fmt.Fprintf(&b, " %q", e.Name)
	}
	b.WriteString(": ")
	b.WriteString(e.Field)
	if e.Value != "" || e.Field == "expression" || e.Field == "name" {
		fmt.Fprintf(&b, " %q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns ErrInvalidSchedule and the cause.
func (e *ScheduleError) Unwrap() []error { return []error{ErrInvalidSchedule, e.Err} }

// Schedule is a cron schedule that enqueues runs of a workflow.
//
// Wall-clock expressions are read in Timezone and follow cron's usual
// daylight-saving rules: when the hour field is restricted (such as
// "30 2 * * *"), a fire whose time falls into a spring-forward gap runs
// once at the end of the gap (03:00 in Europe/Berlin), and a time that
// happens twice in a fall-back night fires at its first occurrence only.
// Expressions whose hour field is "*" (such as "*/10 * * * *") keep their
// pace through both changes. @every durations are absolute.
type Schedule struct {
	// Name is unique among schedules: 1-64 of A-Z a-z 0-9 _ . : -
	Name string
	// Expression is a robfig/cron expression: 5 fields (minute hour
	// day-of-month month day-of-week) or a descriptor such as @hourly,
	// @daily or @every 90s (a whole number of seconds, at least 1s). The
	// TZ= and CRON_TZ= prefixes are rejected: set Timezone instead.
	Expression string
	// Timezone is the IANA zone the expression is read in, such as
	// "Europe/Berlin". Defaults to "UTC".
	Timezone string
	// Workflow is the workflow to enqueue; it must be registered.
	Workflow string
	// Input is the JSON object input of each run (a struct, a map,
	// json.RawMessage or []byte). Defaults to {}.
	Input any
	// CatchUp says what to do with fires missed while no engine ran:
	// CatchUpSkip, CatchUpOne or CatchUpAll. Defaults to CatchUpSkip.
	CatchUp string
	// MaxCatchUp bounds CatchUpAll (at most MaxMaxCatchUp). Defaults to
	// DefaultMaxCatchUp (100).
	MaxCatchUp int
	// Paused schedules do not fire. CreateSchedule stores it, and
	// UpsertSchedule when it creates the schedule; updates keep the
	// stored state (use PauseSchedule and ResumeSchedule).
	Paused bool
}

// CreateSchedule stores a new schedule. It fails with ErrScheduleExists
// when the name is taken and with a *ScheduleError (ErrInvalidSchedule)
// when a field is invalid; nothing is stored then.
func (e *Engine) CreateSchedule(ctx context.Context, s Schedule) error {
	p, err := e.scheduleParams(s)
	if err != nil {
		return err
	}
	if _, err := e.st.ScheduleInsert(ctx, p); err != nil {
		if errors.Is(err, store.ErrScheduleExists) {
			return fmt.Errorf("create schedule %q: %w", s.Name, ErrScheduleExists)
		}
		return fmt.Errorf("create schedule %q: %w", s.Name, err)
	}
	return nil
}

// UpsertSchedule creates the schedule, or updates the definition of the
// existing one: expression, time zone, workflow, input and catch-up. An
// update keeps the paused state and the last fire, and recomputes the next
// fire (from now) only when the expression or the time zone changed.
// Start upserts Config.Schedules this way.
func (e *Engine) UpsertSchedule(ctx context.Context, s Schedule) error {
	p, err := e.scheduleParams(s)
	if err != nil {
		return err
	}
	return e.st.ScheduleUpsert(ctx, p)
}

// UpdateSchedule changes the definition of an existing schedule as
// UpsertSchedule does; s.Paused is ignored. An unknown name is ErrNotFound.
func (e *Engine) UpdateSchedule(ctx context.Context, s Schedule) error {
	p, err := e.scheduleParams(s)
	if err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("schedule %q", s.Name), e.st.ScheduleUpdate(ctx, p))
}

// PauseSchedule stops the schedule firing until ResumeSchedule.
func (e *Engine) PauseSchedule(ctx context.Context, name string) (err error) {
	defer e.audit(ctx, &err, "pause_schedule", slog.String("schedule", name))
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("schedule %q", name),
		e.st.ScheduleSetPaused(ctx, &store.ScheduleSetPausedParams{Name: name, Paused: true}))
}

// ResumeSchedule lets a paused schedule fire again. Its next fire is
// computed from now, so fires due while it was paused are dropped whatever
// its catch-up policy. Resuming a schedule that is not paused changes
// nothing.
func (e *Engine) ResumeSchedule(ctx context.Context, name string) (err error) {
	defer e.audit(ctx, &err, "resume_schedule", slog.String("schedule", name))
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	err = e.st.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.ScheduleLock(ctx, name)
		if err != nil {
			return err
		}
		if !sc.Paused {
			return nil
		}
		spec, err := parseCron(sc.Expression, sc.Timezone)
		if err != nil {
			return fmt.Errorf("stored %w", err)
		}
		next, err := spec.first(e.cfg.Clock())
		if err != nil {
			return err
		}
		return tx.ScheduleSetPaused(ctx, &store.ScheduleSetPausedParams{Name: name, NextFireAt: &next})
	})
	return e.mapErr(fmt.Sprintf("resume schedule %q", name), err)
}

// FireSchedule enqueues a run of the schedule now, also when it is paused,
// with the idempotency key "schedule:<id>:manual:<unix nanoseconds>". The
// schedule's last fire becomes this one; its next fire does not change.
func (e *Engine) FireSchedule(ctx context.Context, name string) (run *Run, err error) {
	defer func() {
		if err == nil {
			e.audit(ctx, &err, "fire_schedule", slog.String("schedule", name), slog.Int64("run", run.ID))
		}
	}()
	if err := checkName("schedule name", name); err != nil {
		return nil, err
	}
	err = e.st.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.ScheduleLock(ctx, name)
		if err != nil {
			return err
		}
		now := e.cfg.Clock()
		key := fmt.Sprintf("schedule:%d:manual:%d", sc.ID, now.UnixNano())
		runs, err := e.enqueue(ctx, tx, []EnqueueParams{{Workflow: sc.Workflow, Input: sc.Input, Options: []EnqueueOption{WithKey(key)}}})
		if err != nil {
			return err
		}
		run = runs[0]
		if err := tx.ScheduleRecordFire(ctx, &store.ScheduleRecordFireParams{ID: sc.ID, At: now, RunID: run.ID}); err != nil {
			return err
		}
		e.log.InfoContext(ctx, "schedule fired by hand", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.Int64("run", run.ID), slog.String("key", key))
		return nil
	})
	if err != nil {
		return nil, e.mapErr(fmt.Sprintf("fire schedule %q", name), err)
	}
	return run, nil
}

// DeleteSchedule deletes the schedule; its runs stay.
func (e *Engine) DeleteSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("schedule %q", name), e.st.ScheduleDelete(ctx, name))
}

// NextFires returns the next n fire times (at most 1000) of expression
// read in timezone ("" is UTC), strictly after after, in that zone. It
// applies the daylight-saving rules the scheduler applies (see Schedule).
// For a stored schedule, the fires after its next_fire_at are
// NextFires(expr, tz, nextFireAt, n): @every counts from the previous fire.
// An invalid expression or zone is a *ScheduleError.
func NextFires(expression, timezone string, after time.Time, n int) ([]time.Time, error) {
	spec, err := parseCron(expression, timezone)
	if err != nil {
		return nil, err
	}
	n = min(n, 1000)
	out := make([]time.Time, 0, max(n, 0))
	for t := after; len(out) < n; {
		if t = spec.next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out, nil
}

// scheduleParams validates s and returns what to store, with the next
// fire computed from now.
func (e *Engine) scheduleParams(s Schedule) (*store.ScheduleParams, error) {
	bad := func(field, value string, err error) error {
		return &ScheduleError{Name: s.Name, Field: field, Value: value, Err: err}
	}
	if !nameRe.MatchString(s.Name) {
		return nil, bad("name", s.Name, errors.New("must be 1-64 of A-Z a-z 0-9 _ . : -"))
	}
	expr := strings.TrimSpace(s.Expression)
	tz := s.Timezone
	if tz == "" {
		tz = "UTC"
	}
	spec, err := parseCron(expr, tz)
	if err != nil {
		var se *ScheduleError
		if errors.As(err, &se) {
			se.Name = s.Name
		}
		return nil, err
	}
	next, err := spec.first(e.cfg.Clock())
	if err != nil {
		return nil, bad("expression", expr, err)
	}
	if _, ok := e.workflow(s.Workflow); !ok {
		return nil, bad("workflow", s.Workflow, fmt.Errorf("%w: register it before scheduling it", ErrUnknownWorkflow))
	}
	input, err := e.encodeInput(s.Input)
	if err != nil {
		return nil, bad("input", "", err)
	}
	catchUp := s.CatchUp
	switch catchUp {
	case "":
		catchUp = CatchUpSkip
	case CatchUpSkip, CatchUpOne, CatchUpAll:
	default:
		return nil, bad("catch_up", catchUp, fmt.Errorf("must be %q, %q or %q", CatchUpSkip, CatchUpOne, CatchUpAll))
	}
	maxCatchUp := s.MaxCatchUp
	if maxCatchUp == 0 {
		maxCatchUp = DefaultMaxCatchUp
	}
	if maxCatchUp < 1 || maxCatchUp > MaxMaxCatchUp {
		return nil, bad("max_catch_up", fmt.Sprint(s.MaxCatchUp), fmt.Errorf("must be between 1 and %d", MaxMaxCatchUp))
	}
	return &store.ScheduleParams{Name: s.Name, Expression: expr, Timezone: tz, Workflow: s.Workflow, Input: input,
		CatchUp: catchUp, MaxCatchUp: maxCatchUp, Paused: s.Paused, NextFireAt: next}, nil
}

// upsertSchedules upserts Config.Schedules in one transaction, after
// validating all of them.
func (e *Engine) upsertSchedules(ctx context.Context) error {
	ps := make([]*store.ScheduleParams, 0, len(e.cfg.Schedules))
	seen := map[string]bool{}
	for i, s := range e.cfg.Schedules {
		if seen[s.Name] {
			return fmt.Errorf("%w: Schedules[%d]: schedule %q appears twice", ErrInvalidConfig, i, s.Name)
		}
		seen[s.Name] = true
		p, err := e.scheduleParams(s)
		if err != nil {
			return fmt.Errorf("%w: Schedules[%d]: %w", ErrInvalidConfig, i, err)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil
	}
	return e.st.InTx(ctx, func(tx *store.Store) error {
		for _, p := range ps {
			if err := tx.ScheduleUpsert(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// scheduler fires due schedules while this engine holds the leader lease
// (the "scheduler" row of leases). Each fire is one transaction that locks
// the schedule row, inserts the runs with the key
// "schedule:<id>:<fire time RFC 3339>" and moves next_fire_at with
// compare-and-set, so two engines that both think they lead can never
// fire a time twice.
type scheduler struct {
	e      *Engine
	holder string // this engine's identity in the leases table

	mu     sync.Mutex
	leader bool
	warned map[int64]string // schedule id -> last fire error logged, to log each once
}

func newScheduler(e *Engine) *scheduler {
	return &scheduler{e: e, holder: e.cfg.WorkerName + "/" + rand.Text()[:10], warned: map[int64]string{}}
}

// runOnce takes or renews the leader lease and, when it holds it, fires
// every due schedule. An engine with no registered workflow cannot fire
// anything and does not compete for the lease.
func (s *scheduler) runOnce(ctx context.Context) error {
	e := s.e
	if len(e.Workflows()) == 0 {
		return nil
	}
	now := e.cfg.Clock()
	leader, err := e.st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: schedulerLease, Holder: s.holder, Now: now, TTL: e.cfg.LeaderLease})
	if err != nil {
		return fmt.Errorf("scheduler lease: %w", err)
	}
	s.setLeader(ctx, leader)
	if !leader {
		return nil
	}
	return s.fireDue(ctx, now)
}

// fireDue fires every schedule due at now, each in its own transaction.
func (s *scheduler) fireDue(ctx context.Context, now time.Time) error {
	e := s.e
	tolerance := max(minSkipTolerance, 2*e.cfg.SchedulerInterval)
	var after int64
	for {
		ids, err := e.st.ScheduleDue(ctx, &store.ScheduleDueParams{Now: now, AfterID: after, Limit: dueBatch})
		if err != nil {
			return err
		}
		for _, id := range ids {
			err := s.fire(ctx, id, now, tolerance)
			if err != nil && (ctx.Err() != nil || store.IsUnavailable(err)) {
				return err // the service backs off and logs it once
			}
			s.noteError(ctx, id, err)
		}
		if len(ids) < dueBatch {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// fire handles one due schedule in one transaction: it locks the row
// (skipping it when another engine holds it), enqueues the runs its
// catch-up policy asks for, and moves next_fire_at past now.
func (s *scheduler) fire(ctx context.Context, id int64, now time.Time, tolerance time.Duration) error {
	e := s.e
	type fired struct {
		at  time.Time
		run *Run
	}
	var (
		sc      *store.Schedule
		done    []fired
		next    time.Time
		skipped bool // every due fire was dropped
	)
	err := e.st.InTx(ctx, func(tx *store.Store) error {
		var err error
		sc, err = tx.ScheduleLockDue(ctx, id, now)
		if errors.Is(err, store.ErrNotFound) {
			sc = nil // fired, paused or deleted meanwhile, or in another engine's hands
			return nil
		}
		if err != nil {
			return err
		}
		spec, err := parseCron(sc.Expression, sc.Timezone)
		if err != nil {
			return fmt.Errorf("stored %w", err)
		}
		keep := 1
		if sc.CatchUp == CatchUpAll {
			keep = max(sc.MaxCatchUp, 1)
		}
		var due []time.Time
		due, next, err = spec.fires(sc.NextFireAt, now, keep)
		if err != nil {
			return err
		}
		if sc.CatchUp == CatchUpSkip && len(due) > 0 && now.Sub(due[len(due)-1]) > tolerance {
			due = nil
		}
		skipped = len(due) == 0
		params := make([]EnqueueParams, len(due))
		for i, at := range due {
			key := fmt.Sprintf("schedule:%d:%s", sc.ID, at.UTC().Format(time.RFC3339))
			params[i] = EnqueueParams{Workflow: sc.Workflow, Input: sc.Input, Options: []EnqueueOption{WithKey(key)}}
		}
		runs, err := e.enqueue(ctx, tx, params)
		if err != nil {
			return err
		}
		adv := &store.ScheduleAdvanceParams{ID: sc.ID, OldNextFireAt: sc.NextFireAt, NextFireAt: next}
		if len(runs) > 0 {
			last := due[len(due)-1]
			adv.LastFireAt, adv.LastRunID = &last, &runs[len(runs)-1].ID
		}
		ok, err := tx.ScheduleAdvance(ctx, adv)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("next_fire_at changed under the row lock")
		}
		done = make([]fired, len(runs))
		for i, r := range runs {
			done[i] = fired{at: due[i], run: r}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fire schedule %d: %w", id, err)
	}
	if sc == nil {
		return nil
	}
	for _, f := range done {
		e.log.InfoContext(ctx, "schedule fired", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.String("workflow", sc.Workflow), slog.Time("fire_time", f.at), slog.Int64("run", f.run.ID),
			slog.Bool("existing", f.run.Existing), slog.Time("next_fire_at", next))
	}
	if skipped {
		e.log.InfoContext(ctx, "schedule skipped missed fires", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.String("catch_up", sc.CatchUp), slog.Time("missed_since", sc.NextFireAt), slog.Time("next_fire_at", next))
	}
	return nil
}

// noteError logs a schedule's fire error once until it changes or clears,
// so a schedule this engine cannot fire (say, of a workflow it does not
// register) does not log every tick. The schedule stays due.
func (s *scheduler) noteError(ctx context.Context, id int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.warned, id)
		return
	}
	if s.warned[id] == err.Error() {
		return
	}
	s.warned[id] = err.Error()
	s.e.log.WarnContext(ctx, "schedule not fired: it stays due", slog.Int64("schedule_id", id), slog.Any("error", err))
}

func (s *scheduler) setLeader(ctx context.Context, leader bool) {
	s.mu.Lock()
	changed := s.leader != leader
	s.leader = leader
	s.mu.Unlock()
	if changed && leader {
		s.e.log.InfoContext(ctx, "scheduler leadership acquired", slog.String("holder", s.holder))
	} else if changed {
		s.e.log.InfoContext(ctx, "scheduler leadership lost", slog.String("holder", s.holder))
	}
}

// stop releases the leader lease, if this engine holds it, so another
// engine takes over at its next tick instead of when the lease expires.
// Call it after the scheduler service stopped. Safe twice.
func (s *scheduler) stop(ctx context.Context) error {
	s.mu.Lock()
	s.leader = false
	s.mu.Unlock()
	if err := s.e.st.LeaseRelease(ctx, schedulerLease, s.holder); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	return nil
}

// cronSpec is a parsed expression read in a time zone.
type cronSpec struct {
	sched cron.Schedule
	loc   *time.Location
	every time.Duration      // > 0 for @every
	spec  *cron.SpecSchedule // nil for @every
	// wallClock is set when the hour field is restricted: such fires keep
	// to the wall clock across daylight-saving changes (see Schedule).
	wallClock bool
}

// parseCron parses expr (robfig/cron standard syntax) in zone tz. Errors
// are *ScheduleError without a schedule name.
func parseCron(expr, tz string) (cs cronSpec, err error) {
	bad := func(field, value string, err error) (cronSpec, error) {
		return cronSpec{}, &ScheduleError{Field: field, Value: value, Err: err}
	}
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return bad("timezone", tz, errors.New("name an IANA zone such as Europe/Berlin: Local differs between machines"))
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return bad("timezone", tz, errors.New("unknown IANA time zone"))
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return bad("expression", expr, errors.New("empty"))
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return bad("expression", expr, errors.New("time zone prefixes are not accepted: set the time zone field instead"))
	}
	cs.loc = loc
	if rest, ok := strings.CutPrefix(expr, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return bad("expression", expr, err)
		case d < time.Second || d%time.Second != 0:
			return bad("expression", expr, errors.New("@every needs a whole number of seconds, at least 1s"))
		}
		cs.every = d
	}
	defer func() { // robfig/cron panics on some malformed input
		if r := recover(); r != nil {
			cs, err = bad("expression", expr, fmt.Errorf("cannot parse: %v", r))
		}
	}()
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return bad("expression", expr, err)
	}
	cs.sched = sched
	if sp, ok := sched.(*cron.SpecSchedule); ok {
		cs.spec = sp
		const allHours = 1<<24 - 1
		cs.wallClock = sp.Hour&allHours != allHours
	}
	return cs, nil
}

// first returns the first fire strictly after now, or an error when the
// expression matches no time in the next five years (such as Feb 30).
func (c cronSpec) first(now time.Time) (time.Time, error) {
	t := c.next(now)
	if t.IsZero() {
		return t, errors.New("matches no time in the next five years")
	}
	return t, nil
}

// next returns the first fire strictly after t, in c's zone; zero when
// there is none within five years.
func (c cronSpec) next(t time.Time) time.Time {
	t = t.In(c.loc)
	if c.spec == nil {
		return c.sched.Next(t)
	}
	for range 1000 { // a fall-back night skips a few repeats at most
		n := c.spec.Next(t)
		if n.IsZero() || !c.wallClock {
			return n
		}
		if g := c.gapFire(t, n); !g.IsZero() {
			return g
		}
		if !repeatedWallTime(n) {
			return n
		}
		t = n
	}
	return time.Time{}
}

// gapFire looks for spring-forward gaps of c's zone in (after, n]: if the
// expression matches a wall time that a gap skipped, it returns the
// instant the gap ends, where that fire runs (robfig/cron skips it).
func (c cronSpec) gapFire(after, n time.Time) time.Time {
	cur := after
	for range 64 { // zone changes before n; DST zones have two a year
		_, end := cur.ZoneBounds()
		if end.IsZero() || end.After(n) {
			return time.Time{}
		}
		_, offBefore := end.Add(-time.Second).Zone()
		_, offAfter := end.Zone()
		if offAfter > offBefore {
			// Wall times [gap start, gap start + gap) did not happen. In
			// the zone's old offset the instants from end on carry them.
			gap := time.Duration(offAfter-offBefore) * time.Second
			old := time.FixedZone("", offBefore)
			m := c.spec.Next(end.Add(-time.Second).In(old))
			if !m.IsZero() && m.Before(end.Add(gap)) {
				return end.In(c.loc)
			}
		}
		cur = end
	}
	return time.Time{}
}

// repeatedWallTime reports whether t's wall time already happened earlier
// that night (t falls in the second pass of a fall-back hour).
func repeatedWallTime(t time.Time) bool {
	_, off := t.Zone()
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if _, offP := t.Add(-d).Zone(); time.Duration(offP-off)*time.Second == d {
			return true
		}
	}
	return false
}

// fires returns the fires in [from, now], where from is a fire (the
// schedule's next_fire_at): the most recent keep of them, oldest first,
// and the first fire after now.
func (c cronSpec) fires(from, now time.Time, keep int) ([]time.Time, time.Time, error) {
	if now.Before(from) {
		return nil, from, nil
	}
	if c.spec == nil {
		// @every counts from the previous fire: from + k×every.
		k := int64(now.Sub(from) / c.every)
		out := make([]time.Time, 0, min(int64(keep), k+1))
		for i := max(0, k-int64(keep)+1); i <= k; i++ {
			out = append(out, from.Add(time.Duration(i)*c.every).In(c.loc))
		}
		return out, from.Add(time.Duration(k+1) * c.every).In(c.loc), nil
	}
	// Look back from now in growing windows, so that a long outage costs
	// about keep steps rather than one step per missed fire.
	for lookback := time.Hour; ; lookback *= 16 {
		start := now.Add(-lookback)
		complete := !start.After(from)
		t := from.In(c.loc)
		if !complete {
			t = c.next(start.Truncate(time.Second).Add(-time.Second))
		}
		ring := make([]time.Time, 0, keep)
		n := 0
		for ; !t.IsZero() && !t.After(now); t = c.next(t) {
			if len(ring) < keep {
				ring = append(ring, t)
			} else {
				ring[n%keep] = t
			}
			n++
		}
		if t.IsZero() {
			return nil, t, errors.New("expression matches no time in the next five years")
		}
		if n >= keep || complete {
			if i := n % keep; n > keep && i > 0 { // rotate the ring: oldest first
				ring = slices.Concat(ring[i:], ring[:i])
			}
			return ring, t, nil
		}
	}
}
