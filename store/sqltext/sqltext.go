// Package sqltext rewrites the placeholders of SQL text outside its
// string literals and -- comments: the store turns bun's ? into
// PostgreSQL's $n, the benchmark's ceiling turns $n into pgbench's :name.
package sqltext

import "strings"

// Rewrite copies query, replacing each mark outside string literals
// and -- comments by what sub returns for the text from there (the
// replacement and how many bytes it stands for). Comments are kept or
// dropped; the first error of sub stops it.
func Rewrite(query string, keepComments bool, mark byte, sub func(rest string) (string, int, error)) (string, error) {
	var b strings.Builder
	b.Grow(len(query) + 64)
	quoted := false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '-' && !quoted && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			if keepComments {
				b.WriteString(query[i : i+end])
			}
			i += end - 1
		case c == '\'':
			quoted = !quoted
			b.WriteByte(c)
		case c == mark && !quoted:
			out, n, err := sub(query[i:])
			if err != nil {
				return "", err
			}
			b.WriteString(out)
			i += n - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
