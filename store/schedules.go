package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrScheduleExists is returned by ScheduleInsert when the name is taken.
var ErrScheduleExists = errors.New("schedule already exists")

// ScheduleParams is the definition of one schedule: what ScheduleInsert
// stores and what ScheduleUpsert and ScheduleUpdate change.
type ScheduleParams struct {
	Name       string
	Expression string
	Timezone   string
	Workflow   string
	Input      json.RawMessage
	CatchUp    string
	MaxCatchUp int
	// Paused is stored by ScheduleInsert and by ScheduleUpsert when it
	// creates the row; updates keep the stored value.
	Paused bool
	// NextFireAt is stored on insert, and on update only when the
	// expression or the time zone changed.
	NextFireAt time.Time
}

// ScheduleInsert stores a new schedule. It returns ErrScheduleExists when
// the name is taken.
func (s *Store) ScheduleInsert(ctx context.Context, p *ScheduleParams) (*Schedule, error) {
	var out []Schedule
	err := s.raw(`
INSERT INTO ?schema.schedules (name, expression, timezone, workflow, input, paused, catch_up, max_catch_up, next_fire_at)
VALUES (?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?)
ON CONFLICT (name) DO NOTHING
RETURNING *`, p.Name, p.Expression, p.Timezone, p.Workflow, jsonArg(p.Input), p.Paused, p.CatchUp, p.MaxCatchUp, p.NextFireAt).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("insert schedule %q: %w", p.Name, err)
	}
	if len(out) == 0 {
		return nil, ErrScheduleExists
	}
	return &out[0], nil
}

// ScheduleUpsert creates the schedule or updates its definition. An update
// keeps paused, last_fire_at and last_run_id, and replaces next_fire_at
// only when the expression or the time zone changed; an update that
// changes nothing writes nothing.
func (s *Store) ScheduleUpsert(ctx context.Context, p *ScheduleParams) error {
	_, err := s.exec(ctx, `
INSERT INTO ?schema.schedules AS s (name, expression, timezone, workflow, input, paused, catch_up, max_catch_up, next_fire_at)
VALUES (?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
	expression = excluded.expression, timezone = excluded.timezone, workflow = excluded.workflow,
	input = excluded.input, catch_up = excluded.catch_up, max_catch_up = excluded.max_catch_up,
	next_fire_at = CASE WHEN s.expression <> excluded.expression OR s.timezone <> excluded.timezone
		THEN excluded.next_fire_at ELSE s.next_fire_at END,
	updated_at = now()
WHERE (s.expression, s.timezone, s.workflow, s.input, s.catch_up, s.max_catch_up)
	IS DISTINCT FROM (excluded.expression, excluded.timezone, excluded.workflow, excluded.input, excluded.catch_up, excluded.max_catch_up)`,
		p.Name, p.Expression, p.Timezone, p.Workflow, jsonArg(p.Input), p.Paused, p.CatchUp, p.MaxCatchUp, p.NextFireAt)
	if err != nil {
		return fmt.Errorf("upsert schedule %q: %w", p.Name, err)
	}
	return nil
}

// ScheduleApplyConfig creates the schedule declared in an engine's config,
// or updates it to p only when p differs from the definition the config
// last gave it (config_definition, see migration 026): an edit made since
// on the site or through the API is kept until the config's definition
// itself changes. Otherwise as ScheduleUpsert.
func (s *Store) ScheduleApplyConfig(ctx context.Context, p *ScheduleParams) error {
	def, err := json.Marshal(map[string]any{"expression": p.Expression, "timezone": p.Timezone, "workflow": p.Workflow,
		"input": p.Input, "catch_up": p.CatchUp, "max_catch_up": p.MaxCatchUp})
	if err != nil {
		return fmt.Errorf("apply schedule %q: %w", p.Name, err)
	}
	_, err = s.exec(ctx, `
INSERT INTO ?schema.schedules AS s (name, expression, timezone, workflow, input, paused, catch_up, max_catch_up, next_fire_at, config_definition)
VALUES (?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?::jsonb)
ON CONFLICT (name) DO UPDATE SET
	expression = excluded.expression, timezone = excluded.timezone, workflow = excluded.workflow,
	input = excluded.input, catch_up = excluded.catch_up, max_catch_up = excluded.max_catch_up,
	next_fire_at = CASE WHEN s.expression <> excluded.expression OR s.timezone <> excluded.timezone
		THEN excluded.next_fire_at ELSE s.next_fire_at END,
	config_definition = excluded.config_definition,
	updated_at = now()
WHERE s.config_definition IS DISTINCT FROM excluded.config_definition`,
		p.Name, p.Expression, p.Timezone, p.Workflow, jsonArg(p.Input), p.Paused, p.CatchUp, p.MaxCatchUp, p.NextFireAt, jsonArg(def))
	if err != nil {
		return fmt.Errorf("apply schedule %q: %w", p.Name, err)
	}
	return nil
}

// ScheduleUpdate changes the definition of an existing schedule, as
// ScheduleUpsert does (p.Paused is ignored). It returns ErrNotFound for an
// unknown name.
func (s *Store) ScheduleUpdate(ctx context.Context, p *ScheduleParams) error {
	res, err := s.exec(ctx, `
UPDATE ?schema.schedules s SET
	expression = ?, timezone = ?, workflow = ?, input = ?::jsonb, catch_up = ?, max_catch_up = ?,
	next_fire_at = CASE WHEN s.expression <> ? OR s.timezone <> ? THEN ?::timestamptz ELSE s.next_fire_at END,
	updated_at = now()
WHERE name = ?`,
		p.Expression, p.Timezone, p.Workflow, jsonArg(p.Input), p.CatchUp, p.MaxCatchUp,
		p.Expression, p.Timezone, p.NextFireAt, p.Name)
	if err != nil {
		return fmt.Errorf("update schedule %q: %w", p.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// ScheduleGet returns the schedule named name.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*Schedule, error) {
	var sc Schedule
	if err := s.raw(`SELECT * FROM ?schema.schedules WHERE name = ?`, name).Scan(ctx, &sc); err != nil {
		return nil, notFound(err)
	}
	return &sc, nil
}

// ScheduleLock returns the schedule named name and locks its row until the
// end of the transaction the store is bound to.
func (s *Store) ScheduleLock(ctx context.Context, name string) (*Schedule, error) {
	var sc Schedule
	if err := s.raw(`SELECT * FROM ?schema.schedules WHERE name = ? FOR UPDATE`, name).Scan(ctx, &sc); err != nil {
		return nil, notFound(err)
	}
	return &sc, nil
}

// ScheduleList returns every schedule, by name.
func (s *Store) ScheduleList(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	if err := s.raw(`SELECT * FROM ?schema.schedules ORDER BY name`).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// ScheduleDelete deletes the schedule named name. It returns ErrNotFound
// for an unknown name.
func (s *Store) ScheduleDelete(ctx context.Context, name string) error {
	res, err := s.exec(ctx, `DELETE FROM ?schema.schedules WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// ScheduleSetPausedParams pauses or resumes one schedule.
type ScheduleSetPausedParams struct {
	Name   string
	Paused bool
	// NextFireAt, when set, replaces next_fire_at (a resume recomputes it).
	NextFireAt *time.Time
}

// ScheduleSetPaused sets a schedule's paused flag. It returns ErrNotFound
// for an unknown name.
func (s *Store) ScheduleSetPaused(ctx context.Context, p *ScheduleSetPausedParams) error {
	res, err := s.exec(ctx, `UPDATE ?schema.schedules SET paused = ?, next_fire_at = coalesce(?::timestamptz, next_fire_at), updated_at = now()
		WHERE name = ?`, p.Paused, p.NextFireAt, p.Name)
	if err != nil {
		return fmt.Errorf("set schedule %q paused=%t: %w", p.Name, p.Paused, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// ScheduleDueParams pages through due schedules.
type ScheduleDueParams struct {
	Now     time.Time
	AfterID int64 // ids above this one
	Limit   int
}

// ScheduleDue returns, in id order, the ids of up to p.Limit schedules
// above p.AfterID that are not paused and whose next fire is at or before
// p.Now.
func (s *Store) ScheduleDue(ctx context.Context, p *ScheduleDueParams) ([]int64, error) {
	var ids []int64
	err := s.raw(`SELECT id FROM ?schema.schedules WHERE NOT paused AND next_fire_at <= ? AND id > ? ORDER BY id LIMIT ?`,
		p.Now, p.AfterID, p.Limit).Scan(ctx, &ids)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return ids, nil
}

// ScheduleLockDue locks the schedule with id until the end of the
// transaction the store is bound to and returns it, if it is still due at
// now and not paused. A row another transaction holds is skipped: the
// result is then ErrNotFound, as for a schedule that is no longer due.
func (s *Store) ScheduleLockDue(ctx context.Context, id int64, now time.Time) (*Schedule, error) {
	var sc Schedule
	err := s.raw(`SELECT * FROM ?schema.schedules WHERE id = ? AND NOT paused AND next_fire_at <= ? FOR UPDATE SKIP LOCKED`,
		id, now).Scan(ctx, &sc)
	if err != nil {
		return nil, notFound(err)
	}
	return &sc, nil
}

// ScheduleAdvanceParams moves a schedule past the fires just handled.
type ScheduleAdvanceParams struct {
	ID int64
	// OldNextFireAt is the next_fire_at the caller read; the update is
	// compare-and-set on it.
	OldNextFireAt time.Time
	NextFireAt    time.Time
	// LastFireAt and LastRunID, when set, record the latest fire.
	LastFireAt *time.Time
	LastRunID  *int64
}

// ScheduleAdvance sets next_fire_at (and the latest fire, if given) when
// next_fire_at is still p.OldNextFireAt. It reports whether it did.
func (s *Store) ScheduleAdvance(ctx context.Context, p *ScheduleAdvanceParams) (bool, error) {
	res, err := s.exec(ctx, `UPDATE ?schema.schedules SET next_fire_at = ?,
		last_fire_at = coalesce(?::timestamptz, last_fire_at), last_run_id = coalesce(?::bigint, last_run_id), updated_at = now()
		WHERE id = ? AND next_fire_at = ?`, p.NextFireAt, p.LastFireAt, p.LastRunID, p.ID, p.OldNextFireAt)
	if err != nil {
		return false, fmt.Errorf("advance schedule %d: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ScheduleRecordFireParams is one fire outside the cron cadence.
type ScheduleRecordFireParams struct {
	ID    int64
	At    time.Time
	RunID int64
}

// ScheduleRecordFire records a fire outside the cron cadence (a manual
// fire): last_fire_at and last_run_id change, next_fire_at does not.
func (s *Store) ScheduleRecordFire(ctx context.Context, p *ScheduleRecordFireParams) error {
	res, err := s.exec(ctx, `UPDATE ?schema.schedules SET last_fire_at = ?, last_run_id = ?, updated_at = now() WHERE id = ?`,
		p.At, p.RunID, p.ID)
	if err != nil {
		return fmt.Errorf("record fire of schedule %d: %w", p.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}
