package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// FuzzEnqueueInput feeds arbitrary bytes as run input: the engine must
// either accept a JSON object or return a typed error, never panic; what
// PostgreSQL refuses (\u0000, lone surrogates, numbers beyond numeric)
// must be ErrInvalidInput, not a database error.
func FuzzEnqueueInput(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `[]`, `null`, `"x"`, `{"a":`, "\x00", `{"a":"\u0000"}`, strings.Repeat("{", 200),
		`{"\u0000":1}`, `{"a":"\\u0000"}`, `{"a":"\ud800"}`, `{"a":"\udc00\ud800"}`, `{"a":"\ud800\udc00"}`,
		`{"a":1e1000000}`, `{"a":-1e-1000000}`, `{"a":0e-20000}`, `{"a":99999999999}`, "{\"a\":\"\xff\xfe\"}", "{\"a\":\"\x00\"}"} {
		f.Add([]byte(s))
	}
	db := pgtest.New(f)
	eng, err := engine.New(db.SQL, engine.Config{MaxInputBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	if err := eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_, err := eng.Enqueue(context.Background(), "w", json.RawMessage(in))
		if err != nil && !errors.Is(err, engine.ErrInvalidInput) && !errors.Is(err, engine.ErrInputTooLarge) {
			t.Fatalf("untyped error for %q: %v", in, err)
		}
	})
}

// FuzzRegister builds workflows from fuzzed dependency strings: register
// must accept or reject with ErrInvalidWorkflow, never panic or hang.
func FuzzRegister(f *testing.F) {
	f.Add("a", "b:a", "c:a,b", "")
	f.Add("a:b", "b:a", "", "")
	f.Add("a:a", "", "", "")
	f.Add("a", "a", "b:zz", "c:")
	f.Add("", ":", "x y:", "é:a")
	db := pgtest.New(f)
	eng, err := engine.New(db.SQL, engine.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, t1, t2, t3, t4 string) {
		var tasks []engine.Task
		for _, spec := range []string{t1, t2, t3, t4} {
			name, deps, _ := strings.Cut(spec, ":")
			task := engine.Task{Name: name, Run: noop}
			if deps != "" {
				task.Deps = strings.Split(deps, ",")
			}
			tasks = append(tasks, task)
		}
		err := eng.Register(engine.Workflow{Name: "fz", Tasks: tasks})
		if err != nil && !errors.Is(err, engine.ErrInvalidWorkflow) {
			t.Fatalf("untyped error: %v", err)
		}
	})
}
