package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The hot statements' rows (claims, transitions) are read positionally, into
// destinations made once per statement, instead of through bun's
// reflection, which looks up every column of every row by name: that was
// a fifth of the engine's CPU in a burn-down.

// rowScanner is a scan destination that reads a statement's rows itself
// (see runPrepared).
type rowScanner interface {
	scanRows(rows *sql.Rows) error
	rowCount() int
}

// claimedNames are the columns of a claim's result (claimedColumns in
// sqlgen_claim_test.go), in order.
var claimedNames = []string{"id", "run_id", "idx", "workflow", "name", "queue", "priority", "status", "attempt",
	"max_attempts", "available_at", "deps", "dependents", "requeue_on_interrupt", "worker_id", "checkpoint",
	"conc_key", "rate_key", "run_input", "trace_context", "dep_outputs"}

// claimedDest returns the destinations of claimedNames in c.
func claimedDest(c *Claimed) []any {
	return []any{column{&c.ID}, column{&c.RunID}, column{&c.Idx}, column{&c.Workflow}, column{&c.Name}, column{&c.Queue},
		column{&c.Priority}, column{&c.Status}, column{&c.Attempt}, column{&c.MaxAttempts}, column{&c.AvailableAt},
		column{&c.Deps}, column{&c.Dependents}, column{&c.RequeueOnInterrupt}, column{&c.WorkerID}, column{&c.Checkpoint},
		column{&c.ConcKey}, column{&c.RateKey}, column{&c.RunInput}, column{&c.TraceContext}, column{&c.DepOutputs}}
}

// claimedRows reads the rows of a claim statement: claimedNames, then the
// columns named tail, scanned into tailDest (which may point into cur,
// the row being read). A row whose id is NULL (a finish-and-claim that
// claimed nothing) is no claim.
type claimedRows struct {
	out      []Claimed
	cur      Claimed
	tail     []string
	tailDest []any
}

func (s *claimedRows) rowCount() int { return len(s.out) }

// claimScratch holds the buffers claims are read into when the caller
// gives none (ClaimParams.Buf). A claim asks for every free slot (1,024
// in a large worker) and under steady load finds a few: room set aside
// for all of them, or grown row by row, was most of the engine's garbage.
// Rows are read into a reused buffer and the claim keeps a copy of
// exactly those it read.
var claimScratch = sync.Pool{New: func() any { return new([]Claimed) }}

func (s *claimedRows) scanRows(rows *sql.Rows) error {
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if err := checkColumns(cols, claimedNames, s.tail); err != nil {
		return err
	}
	dest := append(claimedDest(&s.cur), s.tailDest...)
	// Rows are read into the caller's array (ClaimParams.Buf) when it
	// gave one, else into a pooled one and copied out.
	read, pooled := s.out, cap(s.out) == 0
	if pooled {
		buf := claimScratch.Get().(*[]Claimed)
		read = (*buf)[:0]
		defer func() {
			clear(read) // no references kept alive in the pool
			*buf = read[:0]
			claimScratch.Put(buf)
		}()
	}
	for rows.Next() {
		s.cur = Claimed{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if s.cur.ID != 0 {
			read = append(read, s.cur)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if pooled {
		s.out = append(s.out, read...) // read goes back to the pool
	} else {
		s.out = read
	}
	return nil
}

// checkColumns fails unless cols are want's lists one after the other,
// by name: a statement and its positional reader cannot drift apart
// unnoticed.
func checkColumns(cols []string, want ...[]string) error {
	if all := slices.Concat(want...); !slices.Equal(cols, all) {
		return fmt.Errorf("read rows: columns %v, want %v", cols, all)
	}
	return nil
}

// column scans one column into p, which points to an int64, int, bool,
// string, time.Time, json.RawMessage, []int, []int64, *int64 or
// *string. NULL leaves the zero value (nil for pointers, slices and
// JSON); JSON is copied out of the driver's buffer.
type column struct{ p any }

// skip is the destination of a column a reader does not need.
type skip struct{}

func (skip) Scan(any) error { return nil }

// firstJSON keeps the first non-NULL value of its column over the rows.
type firstJSON struct{ p *json.RawMessage }

func (f firstJSON) Scan(src any) error {
	if src == nil || *f.p != nil {
		return nil
	}
	return column{f.p}.Scan(src)
}

func (c column) Scan(src any) error {
	switch p := c.p.(type) {
	case *int64:
		v, err := scanInt(src)
		*p = v
		return err
	case *int:
		v, err := scanInt(src)
		*p = int(v)
		return err
	case **int64:
		return scanNullable(p, src, scanInt)
	case *bool:
		return scanAs(p, src)
	case *string:
		v, err := scanText(src)
		*p = v
		return err
	case **string:
		return scanNullable(p, src, scanText)
	case *time.Time:
		return scanAs(p, src)
	case *json.RawMessage:
		*p = nil
		switch v := src.(type) {
		case nil:
		case []byte:
			*p = append(json.RawMessage(nil), v...)
		case string:
			*p = json.RawMessage(v)
		default:
			return fmt.Errorf("scan %T into JSON", src)
		}
	case *[]int:
		return scanIntArray(p, src)
	case *[]int64:
		return scanIntArray(p, src)
	default:
		return fmt.Errorf("scan into %T: not a column type", c.p)
	}
	return nil
}

// scanAs scans a column the driver gives as a T into *p, NULL as the
// zero value.
func scanAs[T any](p *T, src any) error {
	switch v := src.(type) {
	case nil:
		var zero T
		*p = zero
	case T:
		*p = v
	default:
		return fmt.Errorf("scan %T into %T", src, *p)
	}
	return nil
}

// scanNullable scans a column into *p with conv, NULL as nil.
func scanNullable[T any](p **T, src any, conv func(any) (T, error)) error {
	*p = nil
	if src == nil {
		return nil
	}
	v, err := conv(src)
	*p = &v
	return err
}

func scanInt(src any) (int64, error) {
	switch v := src.(type) {
	case nil:
		return 0, nil
	case int64:
		return v, nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("scan %T into an integer", src)
}

func scanText(src any) (string, error) {
	switch v := src.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	}
	return "", fmt.Errorf("scan %T into text", src)
}

// scanIntArray scans an integer array column into *p (NULL: nil).
func scanIntArray[T int | int64](p *[]T, src any) error {
	*p = nil
	if src == nil {
		return nil
	}
	text, err := scanText(src)
	if err != nil {
		return err
	}
	v, err := parseIntArray[T](text)
	*p = v
	return err
}

// parseIntArray reads PostgreSQL's text form of an integer array
// without NULLs ("{}", "{1,2}").
func parseIntArray[T int | int64](s string) ([]T, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("scan %q into an integer array", s)
	}
	s = s[1 : len(s)-1]
	out := make([]T, 0, strings.Count(s, ",")+1)
	for s != "" {
		el, rest, _ := strings.Cut(s, ",")
		n, err := strconv.ParseInt(el, 10, 64)
		if err != nil || int64(T(n)) != n {
			return nil, fmt.Errorf("scan integer array element %q: out of range or not an integer", el)
		}
		out = append(out, T(n))
		s = rest
	}
	return out, nil
}

// movedRows reads the rows of a transition statement (sql/transition.sql): a
// move per row, and on the first row the dependents it unblocked and
// promoted and the runs to settle.
type movedRows struct {
	out                         []Moved
	unblocked, promoted, settle []int64
}

func (s *movedRows) rowCount() int { return len(s.out) }

// moves returns the moves scanned and the dependents made ready in SQL
// (promoted), as moves.
func (s *movedRows) moves() (moved, promoted []Moved) {
	if len(s.promoted) > 0 {
		promoted = make([]Moved, len(s.promoted))
		for i, id := range s.promoted {
			promoted[i] = Moved{TaskID: id, From: StatusNotStarted, To: StatusReady}
		}
	}
	return s.out, promoted
}

func (s *movedRows) scanRows(rows *sql.Rows) error {
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	if err := checkColumns(cols, []string{"id", "run_id", "queue", "from_status", "to_status", "attempt", "held_by",
		"unblocked", "promoted", "settle", "first", "notified"}); err != nil {
		return err
	}
	var m Moved
	var unblocked, promoted, settle []int64
	var first bool
	var notified int
	dest := []any{column{&m.TaskID}, column{&m.RunID}, column{&m.Queue}, column{&m.From}, column{&m.To},
		column{&m.Attempt}, column{&m.WorkerID}, column{&unblocked}, column{&promoted}, column{&settle},
		column{&first}, column{&notified}}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		s.out = append(s.out, m)
		// Once per statement, or per level of a cancel (cancel_tree).
		if first {
			s.unblocked, s.promoted, s.settle = append(s.unblocked, unblocked...), append(s.promoted, promoted...), append(s.settle, settle...)
		}
	}
	return rows.Err()
}
