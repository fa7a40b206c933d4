package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

const (
	// DefaultMaxCatchUp is the default bound of CatchUpAll.
	DefaultMaxCatchUp = 100
	// MaxMaxCatchUp is the largest accepted bound of CatchUpAll.
	MaxMaxCatchUp = 10000
)

// Definition is a schedule as declared (the engine's Schedule).
type Definition struct {
	Name       string
	Expression string
	// Timezone is an IANA zone; "" is UTC.
	Timezone string
	Workflow string
	// Input is the runs' input as given, for Checks.Input.
	Input any
	// CatchUp is CatchUpSkip, CatchUpOne or CatchUpAll; "" is CatchUpSkip.
	CatchUp string
	// MaxCatchUp bounds CatchUpAll; 0 is DefaultMaxCatchUp.
	MaxCatchUp int
	Paused     bool
}

// Checks are the engine's checks of a definition's workflow and input.
type Checks struct {
	// Known says whether runs of the workflow can be enqueued (it is
	// registered); Unknown is the error wrapped when not.
	Known   func(name string) bool
	Unknown error
	// Input encodes the runs' input, or returns why it cannot.
	Input func(input any) (json.RawMessage, error)
}

// Params validates d and returns what to store, with the next fire
// computed from now. Errors are *FieldError naming the field: "name",
// "expression", "timezone", "workflow", "input" (its Value is ""),
// "catch_up" or "max_catch_up".
func Params(d Definition, now time.Time, c Checks) (*store.ScheduleParams, error) {
	bad := func(field, value string, err error) error {
		return &FieldError{Field: field, Value: value, Err: err}
	}
	if err := check.Name(d.Name); err != nil {
		return nil, bad("name", d.Name, err)
	}
	expr := strings.TrimSpace(d.Expression)
	tz := d.Timezone
	if tz == "" {
		tz = "UTC"
	}
	spec, err := Parse(expr, tz)
	if err != nil {
		return nil, err
	}
	next, err := spec.First(now)
	if err != nil {
		return nil, bad("expression", expr, err)
	}
	if !c.Known(d.Workflow) {
		return nil, bad("workflow", d.Workflow, fmt.Errorf("%w: register it before scheduling it", c.Unknown))
	}
	input, err := c.Input(d.Input)
	if err != nil {
		return nil, bad("input", "", err)
	}
	catchUp := d.CatchUp
	switch catchUp {
	case "":
		catchUp = CatchUpSkip
	case CatchUpSkip, CatchUpOne, CatchUpAll:
	default:
		return nil, bad("catch_up", catchUp, fmt.Errorf("must be %q, %q or %q", CatchUpSkip, CatchUpOne, CatchUpAll))
	}
	maxCatchUp := d.MaxCatchUp
	if maxCatchUp == 0 {
		maxCatchUp = DefaultMaxCatchUp
	}
	if maxCatchUp < 1 || maxCatchUp > MaxMaxCatchUp {
		return nil, bad("max_catch_up", fmt.Sprint(d.MaxCatchUp), fmt.Errorf("must be between 1 and %d", MaxMaxCatchUp))
	}
	return &store.ScheduleParams{Name: d.Name, Expression: expr, Timezone: tz, Workflow: d.Workflow, Input: input,
		CatchUp: catchUp, MaxCatchUp: maxCatchUp, Paused: d.Paused, NextFireAt: next}, nil
}

// ApplyConfig applies the schedules of an engine's config, validated
// with Params, in one transaction: each is created, or updated when its
// definition in the config changed since a start last applied it (see
// store.ScheduleApplyConfig).
func ApplyConfig(ctx context.Context, st Store, ps []*store.ScheduleParams) error {
	if len(ps) == 0 {
		return nil
	}
	return st.InTx(ctx, func(tx *store.Store) error {
		for _, p := range ps {
			if err := tx.ScheduleApplyConfig(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// NextFires returns the next n fire times (at most 1000) of expression
// read in timezone, strictly after after, in that zone. Errors are
// *FieldError.
func NextFires(expression, timezone string, after time.Time, n int) ([]time.Time, error) {
	spec, err := Parse(expression, timezone)
	if err != nil {
		return nil, err
	}
	n = min(n, 1000)
	out := make([]time.Time, 0, max(n, 0))
	for t := after; len(out) < n; {
		if t = spec.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out, nil
}
