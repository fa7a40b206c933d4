// Package cron is the engine's schedule machinery: parsing robfig/cron
// expressions in a time zone with cron's daylight-saving rules (Spec),
// and the scheduler service that fires due schedules while its engine
// holds the leader lease (Scheduler).
package cron

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // schedules name IANA zones; work where the OS has no zoneinfo

	robfig "github.com/robfig/cron/v3"
)

// FieldError is an invalid expression or time zone.
type FieldError struct {
	// Field is "expression" or "timezone".
	Field string
	// Value is the bad value as given.
	Value string
	// Err says what is wrong with it.
	Err error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %q: %v", e.Field, e.Value, e.Err) }

// Unwrap returns what is wrong.
func (e *FieldError) Unwrap() error { return e.Err }

// Spec is a parsed expression read in a time zone.
type Spec struct {
	sched robfig.Schedule
	loc   *time.Location
	every time.Duration        // > 0 for @every
	spec  *robfig.SpecSchedule // nil for @every
	// wallClock is set when the hour field is restricted: such fires keep
	// to the wall clock across daylight-saving changes (see Schedule).
	wallClock bool
}

// Parse parses expr (robfig/cron standard syntax: 5 fields or a
// descriptor) in the IANA zone tz ("" is UTC). Errors are *FieldError.
func Parse(expr, tz string) (cs Spec, err error) {
	bad := func(field, value string, err error) (Spec, error) {
		return Spec{}, &FieldError{Field: field, Value: value, Err: err}
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
	sched, err := robfig.ParseStandard(expr)
	if err != nil {
		return bad("expression", expr, err)
	}
	cs.sched = sched
	if sp, ok := sched.(*robfig.SpecSchedule); ok {
		cs.spec = sp
		const allHours = 1<<24 - 1
		cs.wallClock = sp.Hour&allHours != allHours
	}
	return cs, nil
}

// First returns the first fire strictly after now, or an error when the
// expression matches no time in the next five years (such as Feb 30).
func (c Spec) First(now time.Time) (time.Time, error) {
	t := c.Next(now)
	if t.IsZero() {
		return t, errors.New("matches no time in the next five years")
	}
	return t, nil
}

// Next returns the first fire strictly after t, in c's zone; zero when
// there is none within five years.
func (c Spec) Next(t time.Time) time.Time {
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
func (c Spec) gapFire(after, n time.Time) time.Time {
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

// Fires returns the fires in [from, now], where from is a fire (the
// schedule's next_fire_at): the most recent keep of them, oldest first,
// and the first fire after now.
func (c Spec) Fires(from, now time.Time, keep int) ([]time.Time, time.Time, error) {
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
			t = c.Next(start.Truncate(time.Second).Add(-time.Second))
		}
		ring := make([]time.Time, 0, keep)
		n := 0
		for ; !t.IsZero() && !t.After(now); t = c.Next(t) {
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
