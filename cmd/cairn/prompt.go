package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// terminalPrompt returns a function that asks for the password on the
// terminal, or nil when stdin is not a terminal. Echo is turned off with
// stty(1) while the password is typed; where stty is missing the password
// is shown as typed, and the prompt says so.
func terminalPrompt(ctx context.Context, stdin *os.File, stderr io.Writer) func() (string, error) {
	fi, err := stdin.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return func() (string, error) {
		stty := func(arg string) error {
			cmd := exec.Command("stty", arg)
			cmd.Stdin = stdin
			return cmd.Run()
		}
		hidden := stty("-echo") == nil
		if hidden {
			defer func() {
				_ = stty("echo")
				fmt.Fprintln(stderr)
			}()
			fmt.Fprint(stderr, "Password: ")
		} else {
			fmt.Fprint(stderr, "Password (shown as typed): ")
		}
		type line struct {
			s   string
			err error
		}
		got := make(chan line, 1)
		go func() {
			s, err := bufio.NewReader(stdin).ReadString('\n')
			got <- line{s, err}
		}()
		select {
		case <-ctx.Done():
			return "", errors.New("interrupted")
		case l := <-got:
			if l.err != nil && l.s == "" {
				return "", fmt.Errorf("read password: %w", l.err)
			}
			return strings.TrimRight(l.s, "\r\n"), nil
		}
	}
}
