package e2e

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/pgtest"
)

// TestMakeHelp: `make help` lists the targets with their variables
// expanded (the address `make run` serves on, not "$(ADDR)").
func TestMakeHelp(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "help", "ADDR=127.0.0.1:9999")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	help := string(out)
	if strings.Contains(help, "$(") {
		t.Errorf("make help prints a variable unexpanded:\n%s", help)
	}
	for _, want := range []string{"on 127.0.0.1:9999", "psql "} {
		if !strings.Contains(help, want) {
			t.Errorf("make help does not say %q:\n%s", want, help)
		}
	}
}

// TestMakeRunStopsCleanlyOnCtrlC: Ctrl-C (SIGINT to the terminal's whole
// process group) stops `make run`'s server gracefully with exit status 0:
// a clean signal stop is no failure ("Error 1").
func TestMakeRunStopsCleanlyOnCtrlC(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	db := pgtest.New(t)
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "run", "ADDR=127.0.0.1:0")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, as a terminal's job
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitFor(t, 3*time.Minute, "the server to listen", func() bool { return strings.Contains(out.String(), "msg=listening") })
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	select {
	case err := <-exited:
		// make itself, sent the same SIGINT, notes the interrupt and dies
		// of it, as at a terminal; what matters is that its recipe, the
		// server, exited 0 (under `go run` it was "Error 1").
		var ee *exec.ExitError
		if err != nil {
			require.ErrorAs(t, err, &ee, "make run on Ctrl-C:\n%s", out.String())
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGINT, "make run exited %v on Ctrl-C:\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("make run did not stop within a minute of Ctrl-C:\n%s", out.String())
	}
	require.NotContains(t, out.String(), "Error 1", "the server exited 0")
	require.Contains(t, out.String(), "engine stopped")
}
