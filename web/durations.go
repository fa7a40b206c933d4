package web

import (
	"fmt"
	"time"

	"github.com/cairnhq/cairn/templates"
)

// This file formats durations and points in time for the pages.

// fmtDuration renders a duration compactly, to two units at most: "850 ms",
// "3.2 s", "2 s", "42 s", "4 min 10 s", "2 h 3 min", "3 d 4 h". A negative one
// (clocks apart) renders as "0 ms".
func fmtDuration(d time.Duration) string {
	two := func(n1 int64, u1 string, n2 int64, u2 string) string {
		if n2 == 0 {
			return fmt.Sprintf("%d %s", n1, u1)
		}
		return fmt.Sprintf("%d %s %d %s", n1, u1, n2, u2)
	}
	switch {
	case d < 0:
		return "0 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 10*time.Second:
		tenths := int64(d / (100 * time.Millisecond))
		if tenths%10 == 0 {
			return fmt.Sprintf("%d s", tenths/10)
		}
		return fmt.Sprintf("%d.%d s", tenths/10, tenths%10)
	case d < time.Minute:
		return fmt.Sprintf("%d s", int64(d/time.Second))
	case d < time.Hour:
		return two(int64(d/time.Minute), "min", int64(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		return two(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "min")
	}
	return two(int64(d/(24*time.Hour)), "d", int64(d%(24*time.Hour)/time.Hour), "h")
}

// stamp is a point in time for a <time> element: RFC 3339 with
// milliseconds, and the UTC text shown until the page's script rewrites
// it in the browser's time zone. The zero time is the zero Stamp ("–").
func stamp(t time.Time) templates.Stamp {
	if t.IsZero() {
		return templates.Stamp{}
	}
	return templates.Stamp{ISO: t.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Text: fmtTime(t) + " UTC"}
}

func stampPtr(t *time.Time) templates.Stamp {
	if t == nil {
		return templates.Stamp{}
	}
	return stamp(*t)
}
