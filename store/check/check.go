// Package check holds the checks of text, names and JSON that every
// entry point of Cairn applies to what callers pass, once for the store,
// the engine and the web server. Each returns an error that says what is
// wrong with the value; callers name the field and type the error.
// SafeText and SafeJSON make what handlers produce storable instead.
//
// It imports nothing of Cairn's.
package check

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Text returns why PostgreSQL cannot store s as text, or nil: s must be
// valid UTF-8 without a NUL byte.
func Text(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("contains a NUL byte")
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	return nil
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// Name returns an error unless s is a name Cairn gives a workflow, task,
// queue or schedule: 1-64 of A-Z a-z 0-9 _ . : -.
func Name(s string) error {
	if !nameRe.MatchString(s) {
		return errors.New("must be 1-64 of A-Z a-z 0-9 _ . : -")
	}
	return nil
}

// MaxLabel is the longest Label, in bytes.
const MaxLabel = 200

// Label returns an error unless s is text (see Text) of at most MaxLabel
// bytes without control characters: what a user may type where a name
// is looked for, such as a filter or a time zone.
func Label(s string) error {
	if err := Text(s); err != nil {
		return err
	}
	if len(s) > MaxLabel {
		return fmt.Errorf("longer than %d characters", MaxLabel)
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return errors.New("contains a control character")
	}
	return nil
}

// Int32 returns an error unless n is at least min and fits a 32-bit
// integer column.
func Int32(n, min int) error {
	if n < min || n > math.MaxInt32 {
		return fmt.Errorf("%d: must be between %d and %d", n, min, math.MaxInt32)
	}
	return nil
}

// Year returns why PostgreSQL's timestamptz cannot take t, or nil: its
// year must be between 1 and 9999.
func Year(t time.Time) error {
	if y := t.Year(); y < 1 || y > 9999 {
		return fmt.Errorf("year %d: must be between 1 and 9999", y)
	}
	return nil
}
