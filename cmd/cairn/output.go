package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// raw prints the API's JSON as it came.
func (c *cli) raw(body []byte) error {
	if _, err := c.stdout.Write(body); err != nil {
		return err
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		_, err := fmt.Fprintln(c.stdout)
		return err
	}
	return nil
}

// decode reads an API answer.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the server's answer is not the JSON cairn expects (is --url a Cairn server?): %w", err)
	}
	return nil
}

// table starts a tab-aligned table with a header.
func (c *cli) table(header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

// row writes one table row; empty cells show as "-".
func row(tw *tabwriter.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, v := range cells {
		s := fmt.Sprint(v)
		parts[i] = cmpStr(strings.ReplaceAll(s, "\t", " "), "-")
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

// when formats a time for a table in local time; nil is "-".
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// cmpStr returns s, or def when s is empty.
func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// compact prints JSON on one line.
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// oneLine keeps the first line of s, cut to n runes.
func oneLine(s string, n int) string {
	s, _, cut := strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		s, cut = string(r[:n]), true
	}
	if cut {
		s += "…"
	}
	return s
}

func pausedState(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

// queueSlots formats a worker's queues and slots: "default:4,mail:2".
func queueSlots(qs map[string]int) string {
	parts := make([]string, 0, len(qs))
	for _, q := range slices.Sorted(maps.Keys(qs)) {
		parts = append(parts, q+":"+strconv.Itoa(qs[q]))
	}
	return strings.Join(parts, ",")
}
