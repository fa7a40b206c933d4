package check

import (
	"bytes"
	"encoding/json"
	"strings"
)

// SafeText returns s with NUL bytes and invalid UTF-8 replaced by U+FFFD:
// text PostgreSQL can store, whatever a handler produced.
func SafeText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// SafeJSON returns b, or when PostgreSQL would refuse it (see JSON), b
// with NUL characters replaced and out-of-range numbers turned into
// strings; nil when even that fails.
func SafeJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || JSON(b) == nil {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	out, err := json.Marshal(scrub(v))
	if err != nil || JSON(out) != nil {
		return nil
	}
	return out
}

func scrub(v any) any {
	switch v := v.(type) {
	case string:
		return SafeText(v)
	case json.Number:
		if JSON([]byte(v)) != nil {
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
			out[SafeText(k)] = scrub(x)
		}
		return out
	}
	return v
}
