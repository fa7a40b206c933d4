package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestSiteBulkRetrySelection: on the runs list, searched down to two
// failed "unstable" runs, an admin ticks both rows and presses Retry; the
// list comes back with a notice saying what was done, and the runs run
// again and complete (their failed check passes on its second attempt,
// and the publish task skipped below it runs). The keyboard moves a
// highlight through the rows and "/" focuses the search box.
func TestSiteBulkRetrySelection(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	api := s.basicClient(siteAdminPassword)
	var ids []int64
	for range 2 {
		status, body := api("POST", "/api/runs", `{"workflow":"unstable","input":{"e2e":"bulk"}}`)
		require.Equal(t, http.StatusCreated, status, body)
		var run struct{ ID int64 }
		require.NoError(t, json.Unmarshal([]byte(body), &run))
		ids = append(ids, run.ID)
	}
	runStatus := func(id int64) string {
		status, body := api("GET", "/api/runs/"+strconv.FormatInt(id, 10), "")
		require.Equal(t, http.StatusOK, status, body)
		var res struct{ Run struct{ Status string } }
		require.NoError(t, json.Unmarshal([]byte(body), &res))
		return res.Run.Status
	}
	for _, id := range ids {
		s.poll(fmt.Sprintf("run %d failed", id), siteTaskWait, func() bool { return runStatus(id) == "failed" },
			func() string { return runStatus(id) })
	}

	s.login(siteAdminPassword)
	resp := s.navigate("/runs?q=e2e:bulk")
	require.Equal(t, http.StatusOK, int(resp.Status))
	s.waitLive()
	require.Equal(t, 2, s.count(`[data-testid=run-row]`))
	require.Contains(t, s.text(`[data-testid=runs-select] label`), "Select all 2 matching")

	// Keyboard: j highlights the first row, j the second, k the first again.
	s.step("press j j k", siteStep, chromedp.KeyEvent("j"), chromedp.KeyEvent("j"), chromedp.KeyEvent("k"))
	require.Equal(t, 1, s.count(`tr.kb-row`))
	require.Equal(t, s.attr(`[data-testid=run-row]`, "data-run-id"), s.attr(`tr.kb-row`, "data-run-id"))
	s.step("press /", siteStep, chromedp.KeyEvent("/"))
	require.Equal(t, "filter-q", evalAs[string](s, `document.activeElement.getAttribute('data-testid')`))
	s.eval(`document.activeElement.blur()`)

	// Ticked by a click in the page's own script: the live list may be
	// re-rendered between chromedp finding a box and clicking it (a
	// schedule firing on the minute did), and the selection is kept
	// across re-renders, which is what the count below checks.
	for _, id := range ids {
		s.eval(`document.querySelector('[data-testid=run-row][data-run-id="` + strconv.FormatInt(id, 10) + `"] [data-testid=run-select]').click()`)
	}
	s.pollText(`[data-testid=selected-count]`, "2 selected", siteStep)
	require.True(t, evalAs[bool](s, `document.querySelector('[data-testid=select-page]').checked`), "the page is all selected")

	resp = s.clickNavigate(`[data-testid=selection-retry]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/runs", s.location().Path, "back on the runs list")
	require.Equal(t, "q=e2e%3Abulk", s.location().RawQuery, "with its search")
	require.Equal(t, "Retried 2 runs.", s.text(`[data-testid=flash]`))
	s.waitLive()
	s.poll("both runs completed on the list", siteRunWait, func() bool {
		st := evalAs[[]string](s, `[...document.querySelectorAll('[data-testid=run-row]')].map(r => r.querySelector('.badge').textContent.trim())`)
		return len(st) == 2 && !slices.ContainsFunc(st, func(x string) bool { return x != "completed" })
	}, func() string {
		return strings.Join(evalAs[[]string](s, `[...document.querySelectorAll('[data-testid=run-row]')].map(r => r.querySelector('.badge').textContent.trim())`), ",")
	})
	for _, id := range ids {
		require.Equal(t, map[string]string{"check": "completed", "publish": "completed"}, s.apiTaskStates(api, id))
	}
}
