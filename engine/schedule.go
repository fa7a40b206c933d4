package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine/internal/cron"
	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
)

// Catch-up policies: what a schedule does with fires missed while no
// engine ran (or while it was the leader's turn and none was).
const (
	// CatchUpSkip drops missed fires. A fire is missed when it is later
	// than the skip tolerance: max(1 minute, 2×Config.SchedulerInterval).
	// Only the most recent due fire can be on time; it fires, the rest do
	// not, and next_fire_at moves to the first fire after now.
	CatchUpSkip = cron.CatchUpSkip
	// CatchUpOne fires once for all the due fires together, with the
	// most recent due fire time.
	CatchUpOne = cron.CatchUpOne
	// CatchUpAll fires every due fire, up to Schedule.MaxCatchUp of them
	// (the most recent ones).
	CatchUpAll = cron.CatchUpAll
)

const (
	// DefaultMaxCatchUp is the default bound of CatchUpAll.
	DefaultMaxCatchUp = cron.DefaultMaxCatchUp
	// MaxMaxCatchUp is the largest accepted Schedule.MaxCatchUp.
	MaxMaxCatchUp = cron.MaxMaxCatchUp
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
	p, err := e.scheduleParams(ctx, s)
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
	p, err := e.scheduleParams(ctx, s)
	if err != nil {
		return err
	}
	return e.st.ScheduleUpsert(ctx, p)
}

// UpdateSchedule changes the definition of an existing schedule as
// UpsertSchedule does; s.Paused is ignored. An unknown name is ErrNotFound.
func (e *Engine) UpdateSchedule(ctx context.Context, s Schedule) error {
	p, err := e.scheduleParams(ctx, s)
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
	err = cron.Resume(ctx, e.st, name, e.cfg.Clock)
	if fe, ok := errors.AsType[*cron.FieldError](err); ok {
		err = fmt.Errorf("stored %w", scheduleError("", fe))
	}
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
	workflow, r, err := cron.FireByHand(ctx, e.st, name, e.cfg.Clock, e.enqueueFires, e.cfg.Logger)
	if err != nil {
		return nil, e.mapErr(fmt.Sprintf("fire schedule %q", name), err)
	}
	return &Run{ID: r.ID, Workflow: workflow, Existing: r.Existing}, nil
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
	fires, err := cron.NextFires(expression, timezone, after, n)
	return fires, scheduleError("", err)
}

// scheduleParams validates s and returns what to store, with the next
// fire computed from now (cron.Params).
func (e *Engine) scheduleParams(ctx context.Context, s Schedule) (*store.ScheduleParams, error) {
	stored := &define.Stored{Read: e.st.WorkflowVersionLatest, Known: e.Workflows} // workflows other engines registered
	p, err := cron.Params(cron.Definition{Name: s.Name, Expression: s.Expression, Timezone: s.Timezone, Workflow: s.Workflow,
		Input: s.Input, CatchUp: s.CatchUp, MaxCatchUp: s.MaxCatchUp, Paused: s.Paused}, e.cfg.Clock(), cron.Checks{
		Known: func(name string) bool {
			_, err := e.prepare(ctx, EnqueueParams{Workflow: name}, stored)
			return !errors.Is(err, ErrUnknownWorkflow)
		},
		Unknown: ErrUnknownWorkflow, Input: e.inputRules().EncodeInput,
	})
	return p, scheduleError(s.Name, err)
}

// upsertSchedules applies Config.Schedules in one transaction, after
// validating all of them: a schedule is created, or updated when its
// definition in the config changed since a start last applied it, so an
// edit made on the site survives restarts until the code changes (see
// cron.ApplyConfig).
func (e *Engine) upsertSchedules(ctx context.Context) error {
	ps := make([]*store.ScheduleParams, 0, len(e.cfg.Schedules))
	seen := map[string]bool{}
	for i, s := range e.cfg.Schedules {
		if seen[s.Name] {
			return fmt.Errorf("%w: Schedules[%d]: schedule %q appears twice", ErrInvalidConfig, i, s.Name)
		}
		seen[s.Name] = true
		p, err := e.scheduleParams(ctx, s)
		if err != nil {
			return fmt.Errorf("%w: Schedules[%d]: %w", ErrInvalidConfig, i, err)
		}
		ps = append(ps, p)
	}
	return cron.ApplyConfig(ctx, e.st, ps)
}

// scheduleError returns err, a *cron.FieldError made a *ScheduleError of
// schedule name.
func scheduleError(name string, err error) error {
	if fe, ok := errors.AsType[*cron.FieldError](err); ok {
		return &ScheduleError{Name: name, Field: fe.Field, Value: fe.Value, Err: fe.Err}
	}
	return err
}

// newScheduler returns the engine's scheduler service: it fires schedules
// through the engine's enqueue, in the fire's transaction.
func newScheduler(e *Engine) *cron.Scheduler {
	return cron.New(cron.Config{
		Store:       e.st,
		Enqueue:     e.enqueueFires,
		Active:      func() bool { return len(e.Workflows()) > 0 },
		Worker:      e.cfg.WorkerName,
		Interval:    e.cfg.SchedulerInterval,
		LeaderLease: e.cfg.LeaderLease,
		Clock:       e.cfg.Clock,
		Logger:      e.cfg.Logger,
		Health:      e.health,
	})
}

// enqueueFires enqueues the runs of schedule fires in tx, each with its
// key (cron.EnqueueFunc).
func (e *Engine) enqueueFires(ctx context.Context, tx *store.Store, fires []cron.Fire) ([]cron.Run, error) {
	params := make([]EnqueueParams, len(fires))
	for i, f := range fires {
		params[i] = EnqueueParams{Workflow: f.Workflow, Input: f.Input, Options: []EnqueueOption{WithKey(f.Key)}}
	}
	runs, err := e.enqueue(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	out := make([]cron.Run, len(runs))
	for i, r := range runs {
		out[i] = cron.Run{ID: r.ID, Existing: r.Existing}
	}
	return out, nil
}
