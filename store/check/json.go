package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of PostgreSQL's numeric type (and so of jsonb numbers): digits
// before the decimal point, and after it.
const (
	numericMaxWeight = 131072
	numericMaxScale  = 16383
	// numericMaxExponent is the exponent beyond which numeric input is
	// refused even for zero.
	numericMaxExponent = 1<<30 - 1
)

// JSON returns why PostgreSQL cannot store b as jsonb, or nil: b
// must be valid JSON in UTF-8 with no \u0000 escape, no lone UTF-16
// surrogate escape and no number beyond the range of numeric.
func JSON(b []byte) error {
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
