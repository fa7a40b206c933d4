package check_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/check"
)

func TestChecks(t *testing.T) {
	require.NoError(t, check.Text("héllo ✓"))
	require.NoError(t, check.Year(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)))
	require.ErrorContains(t, check.Year(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)), "year 10000: must be between 1 and 9999")
	require.Error(t, check.Year(time.Time{}.AddDate(-1, 0, 0)))
	require.ErrorContains(t, check.Text("a\x00b"), "NUL")
	require.ErrorContains(t, check.Text("a\xffb"), "UTF-8")

	require.NoError(t, check.Name("ingest.v2:eu-1_a"))
	for _, bad := range []string{"", "a b", "ü", strings.Repeat("a", 65), "a\x00"} {
		require.Error(t, check.Name(bad), "%q", bad)
	}

	require.NoError(t, check.Label("ünï ✓ America/New_York"))
	require.ErrorContains(t, check.Label(strings.Repeat("w", 201)), "longer than 200 characters")
	require.ErrorContains(t, check.Label("q\a"), "control character")
	require.ErrorContains(t, check.Label("q\x00"), "NUL")

	require.NoError(t, check.Int32(math.MaxInt32, math.MinInt32))
	require.EqualError(t, check.Int32(-1, 0), "-1: must be between 0 and 2147483647")
	require.Error(t, check.Int32(math.MaxInt32+1, 0))
}

func TestSafeTextAndJSON(t *testing.T) {
	require.Equal(t, "a\uFFFDb\uFFFD", check.SafeText("a\x00b\xff"))
	require.NoError(t, check.Text(check.SafeText("a\x00b\xff")))

	require.Equal(t, `{"a":1}`, string(check.SafeJSON([]byte(`{"a":1}`))), "storable JSON is kept as is")
	require.Nil(t, check.SafeJSON(nil))
	require.Error(t, check.JSON([]byte(`{"a\u0000":"\u0000","n":1e999999}`)))
	require.JSONEq(t, `{"a\uFFFD":"\uFFFD","n":"1e999999"}`, string(check.SafeJSON([]byte(`{"a\u0000":"\u0000","n":1e999999}`))))
	require.Nil(t, check.SafeJSON([]byte(`{"a":`)), "what cannot be decoded is dropped")
}
