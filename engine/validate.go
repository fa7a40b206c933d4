package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// The entry points check what callers pass before any of it reaches the
// database, and name the field that was wrong: names (1-64 of A-Z a-z
// 0-9 _ . : -), text (UTF-8 without NUL), numbers stored as 32-bit
// integers, times within years 1 to 9999, and JSON that PostgreSQL's
// jsonb takes (see store.CheckJSON).

// checkName returns ErrInvalidInput unless name is a valid queue or
// schedule name (check.Name).
func checkName(field, name string) error {
	if err := check.Name(name); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalidInput, field, name, err)
	}
	return nil
}

// checkText returns ErrInvalidInput unless s is text PostgreSQL can store
// (check.Text).
func checkText(field, s string) error {
	if err := check.Text(s); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidInput, field, err)
	}
	return nil
}

// checkInt32 returns ErrInvalidInput unless n fits the 32-bit integer
// column it is stored in (check.Int32).
func checkInt32(field string, n int) error {
	if err := check.Int32(n, math.MinInt32); err != nil {
		return fmt.Errorf("%w: %s %w", ErrInvalidInput, field, err)
	}
	return nil
}

// checkTime returns ErrInvalidInput unless t is within years 1 to 9999.
func checkTime(field string, t time.Time) error {
	if y := t.Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%w: %s: year %d: must be between 1 and 9999", ErrInvalidInput, field, y)
	}
	return nil
}

// pgSafeItem makes what a finished attempt writes storable whatever its
// handler produced: one error message or log line with a NUL byte would
// otherwise fail the whole completion batch, again and again.
func pgSafeItem(item store.TransitionItem) store.TransitionItem {
	if item.Error != nil && check.Text(*item.Error) != nil {
		msg := pgSafeText(*item.Error)
		item.Error = &msg
	}
	item.Detail = pgSafeJSON(item.Detail)
	item.Output = pgSafeJSON(item.Output)
	return item
}

// pgSafeText replaces NUL bytes and invalid UTF-8 with U+FFFD.
func pgSafeText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// pgSafeJSON returns b, or when PostgreSQL would refuse it, b with NUL
// characters replaced and out-of-range numbers turned into strings; nil
// when even that fails.
func pgSafeJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || store.CheckJSON(b) == nil {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	out, err := json.Marshal(scrub(v))
	if err != nil || store.CheckJSON(out) != nil {
		return nil
	}
	return out
}

func scrub(v any) any {
	switch v := v.(type) {
	case string:
		return pgSafeText(v)
	case json.Number:
		if store.CheckJSON([]byte(v)) != nil {
			return v.String()
		}
		return v
	case []any:
		for i := range v {
			v[i] = scrub(v[i])
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[pgSafeText(k)] = scrub(x)
		}
		return out
	}
	return v
}
