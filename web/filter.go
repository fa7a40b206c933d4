package web

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
	"github.com/cairnhq/cairn/templates"
)

// Runs list paging.
const (
	pageSize    = 50
	maxPageSize = 500
	// maxSearchTerms caps the key:value terms of one search.
	maxSearchTerms = 8
)

// filterKeys are the query parameters of the runs filter.
var filterKeys = []string{"workflow", "status", "from", "to", "q"}

// runFilterFrom reads the runs filter from query or form values.
func runFilterFrom(v url.Values) templates.RunFilter {
	return templates.RunFilter{
		Workflow: strings.TrimSpace(v.Get("workflow")),
		Status:   strings.TrimSpace(v.Get("status")),
		From:     strings.TrimSpace(v.Get("from")),
		To:       strings.TrimSpace(v.Get("to")),
		Q:        strings.TrimSpace(v.Get("q")),
	}
}

// filterQuery returns the filter as query values (without paging).
func filterQuery(f templates.RunFilter) url.Values {
	v := url.Values{}
	for k, val := range map[string]string{"workflow": f.Workflow, "status": f.Status, "from": f.From, "to": f.To, "q": f.Q} {
		if val != "" {
			v.Set(k, val)
		}
	}
	return v
}

// runParams validates a filter and turns it into store parameters.
func runParams(f templates.RunFilter) (store.RunListParams, error) {
	var p store.RunListParams
	if err := checkName("workflow", f.Workflow); err != nil {
		return p, inField("workflow", err)
	}
	p.Workflow = f.Workflow
	if err := checkText("status", f.Status); err != nil {
		return p, err
	}
	if f.Status != "" {
		if !slices.Contains(runStatuses, f.Status) {
			return p, fieldError("status", "status %q: must be one of %s", f.Status, strings.Join(runStatuses, ", "))
		}
		p.Statuses = []string{f.Status}
	}
	var err error
	if p.CreatedFrom, err = parseTimeParam("from", f.From); err != nil {
		return p, inField("from", err)
	}
	if p.CreatedTo, err = parseTimeParam("to", f.To); err != nil {
		return p, inField("to", err)
	}
	search, err := parseSearch(f.Q)
	if err != nil {
		return p, inField("q", err)
	}
	search.apply(&p)
	return p, nil
}

// parseTimeParam reads a time in UTC: RFC 3339, "2006-01-02T15:04[:05]"
// (as an <input type=datetime-local> sends it) or a date.
func parseTimeParam(name, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			if err := check.Year(t.UTC()); err != nil {
				return nil, badRequest("%s %q: %v", name, s, err)
			}
			return &t, nil
		}
	}
	return nil, badRequest("%s %q: use a time like 2024-05-01T14:30 (UTC) or RFC 3339", name, s)
}

// runSearch is a parsed search of the runs list (see parseSearch).
type runSearch struct {
	// ID keeps one run ("42" or "#42"); 0 when not asked.
	ID int64
	// Key keeps runs with this idempotency key ("key:abc").
	Key *string
	// Input and Output are jsonb containment terms on the run's input and
	// on the output of any of its tasks: every term matches when one of
	// its documents is contained.
	Input, Output [][]json.RawMessage
	// InputHas and OutputHas are JSON paths ("field:*") that must exist.
	InputHas, OutputHas []string
}

// apply adds the search to store parameters.
func (rs runSearch) apply(p *store.RunListParams) {
	p.ID, p.Key = rs.ID, rs.Key
	p.InputMatch, p.OutputMatch = rs.Input, rs.Output
	p.InputPaths, p.OutputPaths = rs.InputHas, rs.OutputHas
}

// searchHelp says how a search is written.
const searchHelp = "write key:value (for example customer:acme), #42 for a run, key:abc for a key, output.total:42 for a task output"

// parseSearch reads a search: terms separated by spaces, all of which a
// run must match.
//   - "42" or "#42": the run of that id.
//   - "key:abc": the run's idempotency key.
//   - "output.path:value": the output of any task of the run contains
//     value at path.
//   - "input.path:value", or "path:value" for any other path: the run's
//     input contains value at path.
//
// A path may be dotted (order.id:42 matches {"order": {"id": 42}}); the
// value * asks only that the path exists. A value in double quotes is a
// string (with JSON escapes); any other value that is JSON (a number,
// true, false, null, an array or object) matches either that JSON value
// or the same text as a string; anything else is a string.
func parseSearch(q string) (runSearch, error) {
	var out runSearch
	if q == "" {
		return out, nil
	}
	if len(q) > 1000 {
		return out, badRequest("search: longer than 1000 characters")
	}
	if err := checkText("search", q); err != nil {
		return out, err
	}
	terms := 0
	rs := []rune(q)
	for i := 0; i < len(rs); {
		if unicode.IsSpace(rs[i]) {
			i++
			continue
		}
		if terms++; terms > maxSearchTerms {
			return out, badRequest("search: at most %d terms", maxSearchTerms)
		}
		start := i
		for i < len(rs) && rs[i] != ':' && !unicode.IsSpace(rs[i]) {
			i++
		}
		if i == len(rs) || rs[i] != ':' {
			word := string(rs[start:i])
			if id, ok := runIDTerm(word); ok {
				if out.ID != 0 && out.ID != id {
					return out, badRequest("search: one run id at most (#%d and #%d)", out.ID, id)
				}
				out.ID = id
				continue
			}
			return out, badRequest("search term %q: %s", word, searchHelp)
		}
		key := string(rs[start:i])
		i++ // the colon
		var alts []any
		exists := false
		if i < len(rs) && rs[i] == '"' {
			j := i + 1
			for j < len(rs) && rs[j] != '"' {
				if rs[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(rs) {
				return out, badRequest("search term %s: unclosed quote", key)
			}
			var str string
			if err := json.Unmarshal([]byte(string(rs[i:j+1])), &str); err != nil {
				return out, badRequest(`search term %s: bad quoted value: use JSON string escapes such as \" and \\`, key)
			}
			if err := store.CheckJSON([]byte(string(rs[i : j+1]))); err != nil {
				return out, badRequest("search term %s: quoted value %v", key, err)
			}
			alts = []any{str}
			i = j + 1
		} else {
			vstart := i
			depth := 0 // let JSON arrays and objects contain spaces
			for i < len(rs) && (depth > 0 || !unicode.IsSpace(rs[i])) {
				switch rs[i] {
				case '[', '{':
					depth++
				case ']', '}':
					depth--
				}
				i++
			}
			raw := string(rs[vstart:i])
			if raw == "" {
				return out, badRequest("search term %s: needs a value (key:value)", key)
			}
			alts = []any{raw}
			exists = raw == "*"
			// JSON that jsonb would refuse (1e1000000) matches as text only.
			if json.Valid([]byte(raw)) && store.CheckJSON([]byte(raw)) == nil {
				alts = []any{json.RawMessage(raw), raw}
			}
		}
		if key == "key" {
			s, ok := alts[len(alts)-1].(string)
			if !ok {
				s = string(alts[0].(json.RawMessage))
			}
			if out.Key != nil && *out.Key != s {
				return out, badRequest("search: one key at most (%q and %q)", *out.Key, s)
			}
			out.Key = &s
			continue
		}
		target := &out.Input
		has := &out.InputHas
		path := strings.Split(key, ".")
		switch path[0] {
		case "output":
			target, has = &out.Output, &out.OutputHas
			fallthrough
		case "input":
			if len(path) == 1 {
				return out, badRequest("search term %s: name a field, as in %s.total:42", key, key)
			}
			path = path[1:]
		}
		for _, part := range path {
			if part == "" {
				return out, badRequest("search term %q: empty key", key)
			}
		}
		if exists {
			*has = append(*has, jsonPath(path))
			continue
		}
		term := make([]json.RawMessage, 0, len(alts))
		for _, v := range alts {
			var doc any = v
			for k := len(path) - 1; k >= 0; k-- {
				doc = map[string]any{path[k]: doc}
			}
			b, err := json.Marshal(doc)
			if err != nil {
				return out, badRequest("search term %s: %v", key, err)
			}
			if err := store.CheckJSON(b); err != nil {
				return out, badRequest("search term %s: %v", key, err)
			}
			term = append(term, b)
		}
		*target = append(*target, term)
	}
	return out, nil
}

// runIDTerm reads a run id term: "42" or "#42".
func runIDTerm(s string) (int64, bool) {
	s = strings.TrimPrefix(s, "#")
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// jsonPath is the SQL/JSON path of a key path: $."a"."b".
func jsonPath(path []string) string {
	var b strings.Builder
	b.WriteString("$")
	for _, p := range path {
		q, _ := json.Marshal(p)
		b.WriteByte('.')
		b.Write(q)
	}
	return b.String()
}

// encodeCursor makes an opaque paging cursor of a runs list row.
func encodeCursor(r store.RunListItem) string {
	return strconv.FormatInt(r.CreatedAt.UnixMicro(), 10) + "_" + strconv.FormatInt(r.ID, 10)
}

func decodeCursor(name, s string) (*store.RunCursor, error) {
	if s == "" {
		return nil, nil
	}
	a, b, ok := strings.Cut(s, "_")
	us, err1 := strconv.ParseInt(a, 10, 64)
	id, err2 := strconv.ParseInt(b, 10, 64)
	at := time.UnixMicro(us).UTC()
	if !ok || err1 != nil || err2 != nil || check.Year(at) != nil {
		return nil, badRequest("%s: bad cursor %q", name, s)
	}
	return &store.RunCursor{CreatedAt: at, ID: id}, nil
}

// runPage is one page of the runs list and its paging cursors.
type runPage struct {
	rows       []store.RunListItem
	next, prev string // cursors; "" when there is no such page
}

// pageParams reads after, before and limit.
func pageParams(v url.Values, p *store.RunListParams, defLimit int) error {
	var err error
	if p.After, err = decodeCursor("after", v.Get("after")); err != nil {
		return inField("after", err)
	}
	if p.Before, err = decodeCursor("before", v.Get("before")); err != nil {
		return inField("before", err)
	}
	if p.After != nil && p.Before != nil {
		return badRequest("give after or before, not both")
	}
	p.Limit = defLimit
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxPageSize {
			return fieldError("limit", "limit %q: must be 1 to %d", l, maxPageSize)
		}
		p.Limit = n
	}
	return nil
}

// listRuns fetches one page (one row more than asked, to know whether
// another page follows) and works out the cursors.
func (s *Server) listRuns(ctx context.Context, p store.RunListParams) (runPage, error) {
	limit := p.Limit
	p.Limit = limit + 1
	rows, err := s.reads(ctx).RunListFiltered(ctx, &p)
	if err != nil {
		return runPage{}, err
	}
	more := len(rows) > limit
	var out runPage
	if p.Before != nil {
		if more {
			rows = rows[1:] // the extra row is the newest
		}
		out.rows = rows
		if len(rows) > 0 {
			out.next = encodeCursor(rows[len(rows)-1])
			if more {
				out.prev = encodeCursor(rows[0])
			}
		}
		return out, nil
	}
	if more {
		rows = rows[:limit]
	}
	out.rows = rows
	if len(rows) > 0 {
		if more {
			out.next = encodeCursor(rows[len(rows)-1])
		}
		if p.After != nil {
			out.prev = encodeCursor(rows[0])
		}
	}
	return out, nil
}

// view builds the list's rows and paging links; the links keep the filter
// and a limit other than the default page size.
func (rp runPage) view(f templates.RunFilter, limit int, paged bool) templates.RunsList {
	l := templates.RunsList{Runs: make([]templates.RunRow, len(rp.rows))}
	for i, r := range rp.rows {
		l.Runs[i] = runRow(r)
	}
	base := filterQuery(f)
	if limit != pageSize {
		base.Set("limit", strconv.Itoa(limit))
	}
	link := func(k, cursor string) string {
		v := maps.Clone(base)
		v.Set(k, cursor)
		return "/runs?" + v.Encode()
	}
	if rp.next != "" {
		l.NextURL = link("after", rp.next)
	}
	if rp.prev != "" {
		l.PrevURL = link("before", rp.prev)
	}
	if paged {
		l.FirstURL = "/runs"
		if len(base) > 0 {
			l.FirstURL += "?" + base.Encode()
		}
	}
	return l
}
