package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// testSiteScheduleForm: the admin creates a schedule in the browser: the
// form shows the next five fires of the expression as it is typed (and
// follows the time zone), the schedule is created and listed; then it is
// edited the same way, and the API shows the new definition.
func testSiteScheduleForm(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)

	resp := s.navigate("/schedules")
	require.Equal(t, http.StatusOK, int(resp.Status))
	resp = s.clickNavigate(`[data-testid=schedule-new]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/schedules/new", s.location().Path)
	s.waitVisible(`[data-testid=preview-empty]`)

	s.fill(`[data-testid=schedule-name]`, "e2e-nightly")
	s.step("pick the workflow", siteStep, chromedp.SetValue(chromedp.CSS(`[data-testid=schedule-workflow]`), "etl"))
	s.fill(`[data-testid=schedule-timezone]`, "Asia/Tokyo")
	s.fill(`[data-testid=schedule-expression]`, "15 9 * * *")
	fires := func() []string {
		return evalAs[[]string](s, `[...document.querySelectorAll('[data-testid=preview-fire]')].map(e => e.textContent.trim())`)
	}
	var shown []string
	s.poll("five next fires at 09:15 JST while typing", siteStep, func() bool {
		shown = fires()
		return len(shown) == 5 && strings.HasSuffix(shown[0], "09:15 JST")
	}, func() string { return strings.Join(shown, " | ") })
	require.Equal(t, "/schedules/new", s.location().Path, "the preview does not leave the page")

	// A mistake shows at once, and goes away when fixed.
	s.retype(`[data-testid=schedule-expression]`, "15 29 * * *")
	s.poll("the preview says what is wrong", siteStep, func() bool {
		return s.count(`[data-testid=preview-error]`) == 1
	}, nil)
	require.Contains(t, s.text(`[data-testid=preview-error]`), "expression")
	s.retype(`[data-testid=schedule-expression]`, "15 9 * * *")
	s.poll("five fires again", siteStep, func() bool { return len(fires()) == 5 }, nil)

	resp = s.clickNavigate(`[data-testid=schedule-save]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/schedules", s.location().Path)
	require.Equal(t, "Schedule e2e-nightly created.", s.text(`[data-testid=flash]`))
	row := `[data-testid=schedule-row][data-schedule=e2e-nightly]`
	require.Contains(t, s.text(row), "15 9 * * *")
	require.Equal(t, 5, s.count(row+` [data-testid=next-fire]`))

	// Edit it.
	resp = s.clickNavigate(row + ` [data-testid=schedule-edit]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/schedules/e2e-nightly/edit", s.location().Path)
	require.Equal(t, 5, len(fires()), "the stored expression's fires")
	s.retype(`[data-testid=schedule-expression]`, "45 18 * * 1-5")
	s.poll("the preview follows the edit", siteStep, func() bool {
		shown = fires()
		return len(shown) == 5 && strings.HasSuffix(shown[0], "18:45 JST")
	}, func() string { return strings.Join(shown, " | ") })
	for _, f := range shown {
		require.False(t, strings.HasPrefix(f, "Sat") || strings.HasPrefix(f, "Sun"), "weekdays only: %v", shown)
	}
	resp = s.clickNavigate(`[data-testid=schedule-save]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "Schedule e2e-nightly saved.", s.text(`[data-testid=flash]`))
	require.Contains(t, s.text(row), "45 18 * * 1-5")

	api := s.basicClient(siteReadonlyPassword)
	status, body := api("GET", "/api/schedules", "")
	require.Equal(t, http.StatusOK, status, body)
	var out struct {
		Schedules []struct {
			Name       string      `json:"name"`
			Expression string      `json:"expression"`
			Timezone   string      `json:"timezone"`
			Workflow   string      `json:"workflow"`
			NextFires  []time.Time `json:"next_fires"`
		} `json:"schedules"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	found := false
	for _, sc := range out.Schedules {
		if sc.Name == "e2e-nightly" {
			found = true
			require.Equal(t, "45 18 * * 1-5", sc.Expression)
			require.Equal(t, "Asia/Tokyo", sc.Timezone)
			require.Equal(t, "etl", sc.Workflow)
			require.Len(t, sc.NextFires, 5)
		}
	}
	require.True(t, found, "e2e-nightly not in %s", body)
}

// retype empties a text input that may hold a typed or rendered value
// (chromedp's Clear empties only the value attribute) and types value into
// it key by key, as a user does.
func (s *site) retype(sel, value string) {
	s.t.Helper()
	s.waitVisible(sel)
	s.eval(fmt.Sprintf(`document.querySelector(%s).value = ""`, strconv.Quote(sel)))
	s.step("type into "+sel, siteStep, chromedp.SendKeys(chromedp.CSS(sel), value))
}
