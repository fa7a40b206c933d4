package browser_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"context"

	"github.com/chromedp/chromedp"

	"github.com/cairnhq/cairn/e2e/browser"
)

// TestChromiumRendersAPage proves the browser starts (installing it when
// needed) and renders a page served on loopback.
func TestChromiumRendersAPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<html><body><h1 id="t">Cairn</h1><script>document.getElementById("t").textContent += " ok"</script></body></html>`))
	}))
	defer srv.Close()
	ctx := browser.NewContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text("#t"))
	if err != nil {
		t.Fatal(err)
	}
	if text != "Cairn ok" {
		t.Fatalf("page text %q, want %q", text, "Cairn ok")
	}
}
