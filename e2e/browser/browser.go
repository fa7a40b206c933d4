// Package browser finds (or installs) Debian's Chromium and starts the
// real Cairn server for browser tests.
package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairnhq/cairn/store/pgcluster"
)

// ErrNoChromium says what to install when no browser can be found.
var ErrNoChromium = errors.New("chromium not found: install it (Debian: apt-get install chromium)")

// Chromium returns the path of a Chromium binary, installing Debian's
// chromium package with apt-get when none is found on Debian as root.
func Chromium(ctx context.Context) (string, error) {
	if p := lookupChromium(); p != "" {
		return p, nil
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := pgcluster.AptInstall(ctx, logger, ErrNoChromium, func() bool { return lookupChromium() != "" }, "chromium"); err != nil {
		return "", err
	}
	if p := lookupChromium(); p != "" {
		return p, nil
	}
	return "", ErrNoChromium
}

func lookupChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// NewContext returns a headless Chromium tab context for t, closed at cleanup.
func NewContext(t testing.TB) context.Context {
	t.Helper()
	path, err := Chromium(context.Background())
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // required as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now
		t.Fatalf("browser: start chromium: %v", err)
	}
	return ctx
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// ServerBinary builds ./cmd/server once per test binary.
func ServerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "server")
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/server")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/server: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// Server is a running cmd/server process.
type Server struct {
	URL string // http://127.0.0.1:PORT
	cmd *exec.Cmd
}

var listenRe = regexp.MustCompile(`msg=listening addr=(\S+)`)

// StartServer starts the real server on a free port against databaseURL
// with the given extra flags and env, waits until it listens, and stops
// it (SIGTERM) at cleanup. Its log goes to the test log.
func StartServer(t testing.TB, databaseURL string, env []string, args ...string) *Server {
	t.Helper()
	bin := ServerBinary(t)
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0", "--database-url", databaseURL}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			t.Log("server: " + line)
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	s := &Server{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	select {
	case a := <-addr:
		s.URL = "http://" + strings.Trim(a, `"`)
	case <-time.After(60 * time.Second):
		t.Fatal("server did not start listening within 60s")
	}
	return s
}
