package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestSiteWaterfall: on the open run page of an "unstable" run, the
// waterfall shows check's failed attempt, then, once check is retried,
// its second attempt completed on the same row, without a reload; the
// page's times are rewritten by the script (relative, the absolute time
// in the browser's time zone in their title), also in what a live
// refresh brings, and the UTC toggle switches them to UTC and is
// remembered across pages.
func TestSiteWaterfall(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login(siteAdminPassword)
	const zone = "Asia/Tokyo" // no summer time, 9 h from UTC: local and UTC differ
	tokyo, err := time.LoadLocation(zone)
	require.NoError(t, err)
	func() {
		ctx, cancel := context.WithTimeout(s.ctx, siteStep)
		defer cancel()
		_, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: zone})
		require.NoError(t, err, "set the browser's time zone")
	}()

	runID := s.enqueueForm("unstable", `{"file":"e2e-waterfall.csv"}`)
	s.waitLive()
	checkID := evalAs[string](s, `[...document.querySelectorAll('[data-testid=dag-node]')]
		.find(g => g.querySelector('text.name').textContent.trim() === 'check').getAttribute('data-task-id')`)
	require.NotEmpty(t, checkID)
	checkBars := `[data-testid=wf-row][data-task="` + checkID + `"] [data-testid=wf-bar]`
	barStatuses := func() []string {
		return evalAs[[]string](s, fmt.Sprintf(`[...document.querySelectorAll(%s)].map(b => b.getAttribute('data-status'))`, strconv.Quote(checkBars)))
	}
	var seen []string
	s.poll("check's failed attempt on the waterfall", siteTaskWait, func() bool {
		seen = barStatuses()
		return len(seen) == 1 && seen[0] == "failed"
	}, func() string { return fmt.Sprint(seen) })

	// Relative times, with the absolute time in Tokyo in their title.
	type timeEl struct {
		Datetime string `json:"datetime"`
		Text     string `json:"text"`
		Title    string `json:"title"`
	}
	created := func() timeEl {
		return evalAs[timeEl](s, `(() => {
			const dt = [...document.querySelectorAll('[data-testid=run-header] dt')].find(e => e.textContent.trim() === 'Created');
			const e = dt.nextElementSibling.querySelector('time');
			return {datetime: e.getAttribute('datetime'), text: e.textContent.trim(), title: e.getAttribute('title')};
		})()`)
	}
	c := created()
	at, err := time.Parse(time.RFC3339Nano, c.Datetime)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(c.Text, " ago"), "created: %q", c.Text)
	require.Equal(t, at.In(tokyo).Format("2006-01-02 15:04:05")+" "+zone, c.Title)
	event := func() timeEl {
		return evalAs[timeEl](s, `(() => {
			const e = document.querySelector('[data-testid=timeline] time[data-abs]');
			return {datetime: e.getAttribute('datetime'), text: e.textContent.trim(), title: e.getAttribute('title')};
		})()`)
	}
	ev := event()
	evAt, err := time.Parse(time.RFC3339Nano, ev.Datetime)
	require.NoError(t, err)
	require.Equal(t, evAt.In(tokyo).Format("2006-01-02 15:04:05.000"), ev.Text, "an event's time, in Tokyo")
	require.Equal(t, "local time", s.text(`[data-testid=utc-toggle]`))

	// The toggle: UTC.
	s.step("switch to UTC", siteStep, chromedp.Click(chromedp.CSS(`[data-testid=utc-toggle]`)))
	require.Equal(t, "UTC", s.text(`[data-testid=utc-toggle]`))
	require.Equal(t, at.UTC().Format("2006-01-02 15:04:05")+" UTC", created().Title)
	require.Equal(t, evAt.UTC().Format("2006-01-02 15:04:05.000"), event().Text)

	// Retry check (with the page's session and CSRF token, as the JSON
	// API takes it): its second attempt joins the first on its row, live.
	status := evalAs[int](s, `fetch('/api/tasks/`+checkID+`/retry', {method: 'POST', credentials: 'same-origin',
		headers: {'X-CSRF-Token': document.querySelector('meta[name=csrf-token]').content}}).then(r => r.status)`, chromedp.EvalAwaitPromise)
	require.Equal(t, http.StatusOK, status)
	s.poll("check's two attempts on the waterfall", siteTaskWait, func() bool {
		seen = barStatuses()
		return len(seen) == 2 && seen[0] == "failed" && seen[1] == "completed"
	}, func() string { return fmt.Sprint(seen) })
	s.pollText(`[data-testid=run-status] .badge`, "completed", siteTaskWait)
	// What the live refreshes brought was rewritten too, still in UTC.
	unwritten := evalAs[[]string](s, `[...document.querySelectorAll('time[data-rel]')].map(e => e.textContent.trim()).filter(t => !/ ago$/.test(t))`)
	require.Empty(t, unwritten, "times the script did not rewrite")
	require.Equal(t, at.UTC().Format("2006-01-02 15:04:05")+" UTC", created().Title)

	// Remembered: another page opens in UTC; toggled back, local again.
	resp := s.navigate("/runs/" + strconv.FormatInt(runID, 10))
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "UTC", s.text(`[data-testid=utc-toggle]`))
	require.Equal(t, at.UTC().Format("2006-01-02 15:04:05")+" UTC", created().Title)
	s.step("switch to local time", siteStep, chromedp.Click(chromedp.CSS(`[data-testid=utc-toggle]`)))
	require.Equal(t, at.In(tokyo).Format("2006-01-02 15:04:05")+" "+zone, created().Title)
}
