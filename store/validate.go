package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/lib/pq"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/cairnhq/cairn/store/check"
)

// ErrInvalidValue is returned for a value PostgreSQL cannot take: text
// with a NUL byte or invalid UTF-8, JSON with a \u0000 escape, a lone
// surrogate or a number beyond numeric's range (checked before any SQL is
// sent), or any other value the server refuses as data (a number out of
// its column's range, a time out of range: SQLSTATE class 22).
var ErrInvalidValue = errors.New("invalid value")

// ErrDataException marks an ErrInvalidValue that PostgreSQL itself raised
// (SQLSTATE class 22) rather than the store's own check: a value that got
// past validation, worth a look.
var ErrDataException = errors.New("refused by the database")

// Limits of PostgreSQL's numeric type (and so of jsonb numbers): digits
// before the decimal point, and after it.
const (
	numericMaxWeight = 131072
	numericMaxScale  = 16383
	// numericMaxExponent is the exponent beyond which numeric input is
	// refused even for zero.
	numericMaxExponent = 1<<30 - 1
)

// CheckText returns why PostgreSQL cannot store s as text (a NUL byte,
// invalid UTF-8), or nil: check.Text.
func CheckText(s string) error { return check.Text(s) }

// CheckJSON returns why PostgreSQL cannot store b as jsonb, or nil: b
// must be valid JSON in UTF-8 with no \u0000 escape, no lone UTF-16
// surrogate escape and no number beyond the range of numeric.
func CheckJSON(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("is not valid UTF-8")
	}
	if !json.Valid(b) {
		return errors.New("is not valid JSON")
	}
	// b is valid JSON: a string starts at an unescaped quote, a number at
	// a '-' or digit outside strings.
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, err := checkJSONString(b, i+1)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end := i + 1
			for end < len(b) && bytes.IndexByte([]byte("0123456789+-.eE"), b[end]) >= 0 {
				end++
			}
			if err := checkJSONNumber(b[i:end]); err != nil {
				return err
			}
			i = end - 1
		}
	}
	return nil
}

// checkJSONString checks the string whose content starts at b[i] and
// returns the index of its closing quote.
func checkJSONString(b []byte, i int) (int, error) {
	pendingHigh := false // the previous escape was a high surrogate
	for ; i < len(b); i++ {
		c := b[i]
		if c == '"' {
			if pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\ud800-\udbff not followed by \udc00-\udfff)`)
			}
			return i, nil
		}
		if c != '\\' {
			if pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\ud800-\udbff not followed by \udc00-\udfff)`)
			}
			continue
		}
		i++
		if b[i] != 'u' {
			if pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\ud800-\udbff not followed by \udc00-\udfff)`)
			}
			continue
		}
		var r rune
		for _, h := range b[i+1 : i+5] {
			r <<= 4
			switch {
			case h >= '0' && h <= '9':
				r |= rune(h - '0')
			case h >= 'a' && h <= 'f':
				r |= rune(h-'a') + 10
			default:
				r |= rune(h-'A') + 10
			}
		}
		i += 4
		switch {
		case r == 0:
			return 0, errors.New(`contains a NUL character (\u0000), which PostgreSQL cannot store`)
		case r >= 0xd800 && r < 0xdc00:
			if pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\ud800-\udbff not followed by \udc00-\udfff)`)
			}
			pendingHigh = true
		case r >= 0xdc00 && r < 0xe000:
			if !pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\udc00-\udfff not after \ud800-\udbff)`)
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return 0, errors.New(`contains a lone UTF-16 surrogate escape (\ud800-\udbff not followed by \udc00-\udfff)`)
			}
		}
	}
	return 0, errors.New("is not valid JSON")
}

// checkJSONNumber checks that a JSON number fits PostgreSQL's numeric:
// at most numericMaxWeight digits before the decimal point and
// numericMaxScale after it, as written (1e-16384 and 0e-20000 are
// refused, as PostgreSQL refuses them).
func checkJSONNumber(n []byte) error {
	s := string(bytes.TrimPrefix(n, []byte("-")))
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	e := 0
	if hasExp {
		exp = strings.TrimPrefix(exp, "+")
		neg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(strings.TrimPrefix(exp, "-"), "0")
		if len(exp) > 10 {
			return errNumericRange(n)
		}
		for _, d := range exp {
			e = e*10 + int(d-'0')
		}
		if e >= numericMaxExponent {
			return errNumericRange(n)
		}
		if neg {
			e = -e
		}
	}
	if len(frac)-e > numericMaxScale {
		return errNumericRange(n)
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return nil // zero
	}
	if len(intPart)+e-first > numericMaxWeight {
		return errNumericRange(n)
	}
	return nil
}

// errNumericRange returns the error for a number out of numeric's range,
// made only when one is found: every number of every JSON argument of the
// hot path is checked.
func errNumericRange(n []byte) error {
	return fmt.Errorf("contains a number (%s) beyond the range of PostgreSQL's numeric: at most %d digits before the decimal point and %d after it",
		abbrev(n, 24), numericMaxWeight, numericMaxScale)
}

func abbrev(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// jsonArg marks a query argument as JSON text for a jsonb parameter, so
// checkArgs applies CheckJSON to it.
type jsonArg []byte

// Value passes the JSON to lib/pq as text.
func (j jsonArg) Value() (any, error) { return string(j), nil }

// AppendQuery appends the JSON to bun's query text as a string literal.
func (j jsonArg) AppendQuery(gen schema.QueryGen, b []byte) ([]byte, error) {
	return gen.Dialect().AppendString(b, string(j)), nil
}

// arrayArg is a Postgres array argument of raw queries; checkArgs checks
// its elements.
type arrayArg struct{ v any }

// AppendQuery appends the array as bun's pgdialect.Array does.
func (a arrayArg) AppendQuery(gen schema.QueryGen, b []byte) ([]byte, error) {
	return pgdialect.Array(a.v).AppendQuery(gen, b)
}

// checkArgs returns ErrInvalidValue, naming the argument, for the first
// argument that PostgreSQL cannot take (see CheckText, CheckJSON). It
// looks into pointers, slices and arrays. Every query goes through it
// before its text or parameters are sent.
func checkArgs(args []any) error {
	for i, a := range args {
		if err := checkValue(reflect.ValueOf(a)); err != nil {
			return fmt.Errorf("%w: argument %d: %w", ErrInvalidValue, i+1, err)
		}
	}
	return nil
}

var (
	jsonArgType    = reflect.TypeFor[jsonArg]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	arrayArgType   = reflect.TypeFor[arrayArg]()
)

func checkValue(v reflect.Value) error {
	if !v.IsValid() {
		return nil
	}
	switch v.Type() {
	case jsonArgType, rawMessageType:
		if v.IsNil() {
			return nil
		}
		return CheckJSON(v.Bytes())
	case arrayArgType:
		return checkValue(reflect.ValueOf(v.Interface().(arrayArg).v))
	}
	switch v.Kind() {
	case reflect.String:
		return check.Text(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkValue(v.Elem())
	case reflect.Slice, reflect.Array:
		switch v.Type().Elem().Kind() {
		case reflect.String, reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Array:
		default:
			return nil // numbers, booleans, bytea
		}
		for i := range v.Len() {
			if err := checkValue(v.Index(i)); err != nil {
				return fmt.Errorf("element %d: %w", i+1, err)
			}
		}
	}
	return nil
}

// invalidValue turns PostgreSQL's data exceptions (SQLSTATE class 22: a
// number out of range, an invalid byte sequence, bad JSON...) into
// ErrInvalidValue; other errors pass through.
func invalidValue(err error) error {
	var pe *pq.Error
	if errors.As(err, &pe) && strings.HasPrefix(string(pe.Code), "22") {
		return fmt.Errorf("%w: %s (%w)", ErrInvalidValue, pe.Message, ErrDataException)
	}
	return err
}
