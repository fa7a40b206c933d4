package logcapture_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/logcapture"
)

// detail decodes what Detail stores.
type detail struct {
	Log   []logcapture.Line `json:"log"`
	Stack string            `json:"stack"`
}

func decode(t *testing.T, b json.RawMessage) detail {
	t.Helper()
	var d detail
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

func TestDetailIsEmptyWithoutLinesOrStack(t *testing.T) {
	t.Parallel()
	var l logcapture.Log
	require.Nil(t, l.Detail(nil))
	d := decode(t, l.Detail([]byte("goroutine 1")))
	require.Equal(t, "goroutine 1", d.Stack)
	require.Empty(t, d.Log)
}

func TestLinesKeepLevelAttrsAndGroups(t *testing.T) {
	t.Parallel()
	var l logcapture.Log
	var next bytes.Buffer
	var live []logcapture.Line
	log := slog.New(l.Handler(slog.NewTextHandler(&next, &slog.HandlerOptions{Level: slog.LevelWarn}),
		func(line logcapture.Line) { live = append(live, line) }))

	log.Debug("below the engine's level", "n", 1)
	log.With("region", "eu").WithGroup("g").Warn("careful", "n", 2)
	log.Error("broken", slog.Group("req", "id", 7))

	d := decode(t, l.Detail([]byte("stack")))
	require.Equal(t, "stack", d.Stack)
	require.Len(t, d.Log, 3, "every line is kept, whatever the next handler's level")
	require.Equal(t, "DEBUG", d.Log[0].Level)
	require.Equal(t, "below the engine's level", d.Log[0].Msg)
	require.Equal(t, map[string]any{"n": "1"}, d.Log[0].Attrs)
	require.Equal(t, "WARN", d.Log[1].Level)
	// Attributes of With are kept as values, the record's as text; a
	// group does not prefix the keys.
	require.Equal(t, map[string]any{"region": "eu", "n": "2"}, d.Log[1].Attrs)
	require.Equal(t, "ERROR", d.Log[2].Level)
	require.Equal(t, map[string]any{"req": "[id=7]"}, d.Log[2].Attrs)
	require.Len(t, live, 3, "every kept line goes live")
	require.Equal(t, "careful", live[1].Msg)

	out := next.String()
	require.NotContains(t, out, "below the engine's level", "the next handler's level holds for it")
	require.Contains(t, out, "region=eu g.n=2")
	require.Contains(t, out, "req.id=7")
}

func TestLinesAreCappedAtMaxLines(t *testing.T) {
	t.Parallel()
	var l logcapture.Log
	lives := 0
	log := slog.New(l.Handler(slog.DiscardHandler, func(logcapture.Line) { lives++ }))
	for i := range logcapture.MaxLines + 50 {
		log.Info(fmt.Sprintf("line %d", i))
	}
	d := decode(t, l.Detail(nil))
	require.Len(t, d.Log, logcapture.MaxLines)
	require.Equal(t, "line 0", d.Log[0].Msg)
	require.Equal(t, fmt.Sprintf("line %d", logcapture.MaxLines-1), d.Log[logcapture.MaxLines-1].Msg)
	require.Equal(t, logcapture.MaxLines, lives, "lines past the cap do not go live either")
}

func TestWithoutLiveLinesStillCapture(t *testing.T) {
	t.Parallel()
	var l logcapture.Log
	slog.New(l.Handler(slog.DiscardHandler, nil)).InfoContext(context.Background(), "quiet")
	d := decode(t, l.Detail(nil))
	require.Len(t, d.Log, 1)
	require.True(t, strings.HasPrefix(d.Log[0].Msg, "quiet"))
}
