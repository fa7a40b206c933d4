package e2e

import (
	"os/exec"
	"strings"
	"testing"
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
