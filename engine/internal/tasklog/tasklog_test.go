package tasklog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/tasklog"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var at = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// batches is the store the writer writes to, recording the size of each
// write it passes on.
type batches struct {
	*store.Store
	mu    sync.Mutex
	sizes []int
}

func (b *batches) TaskLogAppend(ctx context.Context, lines []store.TaskLogLine) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(lines))
	b.mu.Unlock()
	return b.Store.TaskLogAppend(ctx, lines)
}

func (b *batches) written() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

type bundle struct {
	st     *batches
	health *backoff.Health
	warns  chan slog.Record
	task   store.Task // a task of the database, whose attempt the lines carry
}

func setup(t *testing.T) bundle {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	runs, err := st.RunInsertMany(ctx, []store.RunInsertParams{{Workflow: "w", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}})
	require.NoError(t, err)
	tasks, err := st.TaskListByRun(ctx, runs[0].ID)
	require.NoError(t, err)
	warns := make(chan slog.Record, 100)
	log := slog.New(&warnHandler{warns: warns})
	return bundle{st: &batches{Store: st}, health: backoff.NewHealth(log, func() time.Time { return at }), warns: warns, task: tasks[0]}
}

// warnHandler sends every warning it handles.
type warnHandler struct{ warns chan slog.Record }

func (h *warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnHandler) Handle(_ context.Context, r slog.Record) error {
	h.warns <- r
	return nil
}
func (h *warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnHandler) WithGroup(string) slog.Handler      { return h }

func (b bundle) writer() *tasklog.Writer {
	return tasklog.New(tasklog.Config{Store: b.st, Logger: b.health.Logger(), Health: b.health})
}

func (b bundle) line(i int) store.TaskLogLine {
	return store.TaskLogLine{TaskID: b.task.ID, RunID: b.task.RunID, Attempt: b.task.Attempt, At: at,
		Level: "INFO", Msg: fmt.Sprintf("line %d", i)}
}

// stored returns the messages of the task's live log, oldest first.
func (b bundle) stored(t *testing.T) []string {
	t.Helper()
	lines, _, err := b.st.TaskLogRecent(context.Background(), b.task.ID, 2*tasklog.Buffer)
	require.NoError(t, err)
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Msg
	}
	return out
}

func msgs(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("line %d", i))
	}
	return out
}

// Flush writes what is buffered in order, at most Batch lines a
// statement.
func TestWriterBatchesAndWritesLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.writer()
	n := 2*tasklog.Batch + 10
	for i := range n {
		w.Add(b.line(i))
	}
	w.Flush(context.Background())
	require.Equal(t, []int{tasklog.Batch, tasklog.Batch, 10}, b.st.written())
	require.Equal(t, msgs(0, n), b.stored(t))
	w.Flush(context.Background())
	require.Len(t, b.st.written(), 3, "nothing buffered: nothing written")
}

// A started writer writes lines as they come, and Stop writes what is
// still buffered; lines added after Stop are dropped.
func TestWriterWritesLiveAndStopFlushes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.writer()
	require.NoError(t, w.Start(context.Background()))
	require.Error(t, w.Start(context.Background()), "a writer starts once")
	w.Add(b.line(0))
	deadline := time.Now().Add(10 * time.Second)
	for len(b.stored(t)) == 0 {
		require.True(t, time.Now().Before(deadline), "the line was not written")
		time.Sleep(10 * time.Millisecond)
	}
	for i := 1; i < 50; i++ {
		w.Add(b.line(i))
	}
	w.Stop()
	require.Equal(t, msgs(0, 50), b.stored(t), "Stop writes what is buffered")
	w.Stop() // safe twice
	w.Add(b.line(50))
	w.Flush(context.Background())
	require.Equal(t, msgs(0, 50), b.stored(t), "a line added after Stop is dropped")
}

// Stop before Start returns at once.
func TestWriterStopBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.writer()
	w.Stop()
	w.Stop()
}

// Lines that find the buffer full are dropped and counted in one
// warning; those buffered are written.
func TestWriterDropsLinesWhenItsBufferIsFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.writer()
	for i := range tasklog.Buffer + 5 {
		w.Add(b.line(i))
	}
	w.Flush(context.Background())
	r := <-b.warns
	require.Equal(t, "live task log buffer full: lines dropped from the live log", r.Message)
	r.Attrs(func(a slog.Attr) bool {
		require.Equal(t, "lines", a.Key)
		require.EqualValues(t, 5, a.Value.Int64())
		return true
	})
	require.Len(t, b.stored(t), tasklog.Buffer)
}

// A failed write is reported to the health tracker (loop "task log") and
// its lines are dropped.
func TestWriterReportsFailedWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := store.Open(context.Background(), pgtest.ServerURL(), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, db.Close()) // every write fails
	closed, err := store.New(db, pgtest.Schema)
	require.NoError(t, err)
	w := tasklog.New(tasklog.Config{Store: closed, Logger: b.health.Logger(), Health: b.health})
	w.Add(b.line(0))
	w.Flush(context.Background())
	require.EqualValues(t, 1, b.health.FailedTries("task log"))
	w.Flush(context.Background())
	require.EqualValues(t, 1, b.health.FailedTries("task log"), "the failed lines were dropped")
}

// Line makes a captured line storable: no NUL, valid UTF-8, text cut at
// MaxText on a rune boundary, at most MaxAttrs attributes, as text.
func TestLineCleansTextAndAttributes(t *testing.T) {
	t.Parallel()
	attrs := map[string]any{}
	for i := range tasklog.MaxAttrs + 3 {
		attrs[fmt.Sprintf("k%d", i)] = i
	}
	long := strings.Repeat("é", tasklog.MaxText) // two bytes a rune
	l := tasklog.Line(store.TaskLogLine{TaskID: 1, Msg: "a\x00b\xff" + long}, attrs)
	require.EqualValues(t, 1, l.TaskID)
	require.True(t, strings.HasPrefix(l.Msg, "ab\uFFFDé"))
	require.True(t, strings.HasSuffix(l.Msg, "…"))
	require.LessOrEqual(t, len(l.Msg), tasklog.MaxText)
	require.True(t, utf8.ValidString(l.Msg))
	require.Len(t, l.Attrs, tasklog.MaxAttrs)
	for k, v := range l.Attrs {
		require.Equal(t, k, "k"+v)
	}
	require.Nil(t, tasklog.Line(store.TaskLogLine{Msg: "x"}, nil).Attrs)
	require.Equal(t, "short", tasklog.CleanText("short"))
}
