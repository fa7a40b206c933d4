package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

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

// CheckText returns why PostgreSQL cannot store s as text (a NUL byte,
// invalid UTF-8), or nil: check.Text.
func CheckText(s string) error { return check.Text(s) }

// CheckJSON returns why PostgreSQL cannot store b as jsonb, or nil: b
// must be valid JSON in UTF-8 with no \u0000 escape, no lone UTF-16
// surrogate escape and no number beyond the range of numeric
// (check.JSON).
func CheckJSON(b []byte) error { return check.JSON(b) }

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
