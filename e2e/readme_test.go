package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	lang string // the fence's info string, e.g. "go" or "sql"
	line int    // line of the opening fence, 1-based
	text string
	skip string // the reason given by a <!-- readme-test: skip REASON --> comment on the line before the fence
}

// readmeSkipMarker, on the line right before a fence, exempts that block
// from TestReadmeCodeBlocks. The README must say why after the marker.
const readmeSkipMarker = "<!-- readme-test: skip"

// readmeBlocks returns the fenced code blocks of the Markdown file at path.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var (
		blocks []readmeBlock
		cur    *readmeBlock
		body   strings.Builder
		prev   string
		n      int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &readmeBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: n}
			if p := strings.TrimSpace(prev); strings.HasPrefix(p, readmeSkipMarker) {
				cur.skip = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(p, readmeSkipMarker), "-->"))
				if cur.skip == "" {
					t.Errorf("README.md:%d: a skipped block must say why in its readme-test comment", n)
				}
			}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: code block never closed", cur.line)
	}
	return blocks
}

// TestReadmeCodeBlocks keeps README.md's examples honest. Every ```go
// block is a complete, gofmt-formatted file of package main with its
// imports; all of them are built together against this module (one
// package each, one `go build`). Every ```sql block runs against a freshly migrated database in
// a transaction that is rolled back.
func TestReadmeCodeBlocks(t *testing.T) {
	blocks := readmeBlocks(t, filepath.Join("..", "README.md"))
	var goBlocks, sqlBlocks []readmeBlock
	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("README.md:%d: %s block skipped: %s", b.line, b.lang, b.skip)
			continue
		}
		switch b.lang {
		case "go":
			goBlocks = append(goBlocks, b)
		case "sql":
			sqlBlocks = append(sqlBlocks, b)
		}
	}
	if len(goBlocks) == 0 || len(sqlBlocks) == 0 {
		t.Fatalf("README.md has %d go and %d sql blocks; expected some of each", len(goBlocks), len(sqlBlocks))
	}
	t.Run("go", func(t *testing.T) {
		t.Parallel()
		checkReadmeGo(t, goBlocks)
	})
	t.Run("sql", func(t *testing.T) {
		t.Parallel()
		checkReadmeSQL(t, sqlBlocks)
	})
}

// checkReadmeGo writes each block into its own package directory under one
// temporary directory inside this module and builds them all at once.
func checkReadmeGo(t *testing.T, blocks []readmeBlock) {
	for _, b := range blocks {
		if !strings.HasPrefix(strings.TrimSpace(b.text), "package main") {
			t.Errorf("README.md:%d: a go block must be a complete file starting with \"package main\"", b.line)
		}
		if formatted, err := format.Source([]byte(b.text)); err == nil && string(formatted) != b.text {
			t.Errorf("README.md:%d: go block is not gofmt-formatted; gofmt gives:\n%s", b.line, formatted)
		}
	}
	// Inside the module (this package's directory), so that the blocks
	// import github.com/cairnhq/cairn/... at this tree's version. The
	// name starts with neither "." nor "_", which `go build` would refuse.
	dir, err := os.MkdirTemp(".", "readmeblocks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, b := range blocks {
		pkg := filepath.Join(dir, fmt.Sprintf("line%04d", b.line))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "./"+filepath.Base(dir)+"/...")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Errors name readmeblocksN/lineLLLL/main.go:R:C; LLLL is the
		// fence's line in README.md, so README line = LLLL + R.
		t.Errorf("go blocks of README.md do not build (a file lineLLLL/main.go:R is README.md line LLLL+R):\n%s", out)
	}
}

// checkReadmeSQL runs each block in its own transaction on one migrated
// database and rolls it back. Before them the database is given the
// stored definition of the README's example workflow "ingest" (tasks
// fetch, then parse), which the blocks' cairn.enqueue, send_signal and
// cancel_run calls use: an engine without a worker registers it and is
// started (Start stores the registered definitions in workflow_versions)
// and shut down. Nothing else is there: no worker, no runs.
func checkReadmeSQL(t *testing.T, blocks []readmeBlock) {
	db := pgtest.New(t)
	ctx := context.Background()
	storeReadmeWorkflow(t, db.SQL)
	for _, b := range blocks {
		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, b.text); err != nil {
			t.Errorf("README.md:%d: sql block fails: %v\n%s", b.line, err, b.text)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatalf("README.md:%d: rollback: %v", b.line, err)
		}
	}
}

// storeReadmeWorkflow stores the definition of the README's workflow
// "ingest" (fetch, then parse) in db, as an engine that registers it does.
func storeReadmeWorkflow(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	noop := func(context.Context, *engine.TaskHandle) error { return nil }
	eng, err := engine.New(db, engine.Config{NoWorker: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(engine.Workflow{Name: "ingest", Tasks: []engine.Task{
		{Name: "fetch", Run: noop},
		{Name: "parse", Deps: []string{"fetch"}, Run: noop},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM cairn.workflow_versions WHERE workflow = 'ingest'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("workflow_versions holds %d definitions of ingest after Register and Start, want 1", n)
	}
}
