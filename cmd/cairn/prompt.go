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
// terminal, or nil when stdin is not a character device. The standard
// library cannot tell a terminal from /dev/null, so the function asks
// stty(1), which also turns echo off while the password is typed: where
// stty fails (not a terminal, or no stty as on Windows) there is no
// prompt and cairn says to set CAIRN_PASSWORD.
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
		if err := stty("-echo"); err != nil {
			return "", errors.New("stdin is not a terminal")
		}
		defer func() {
			_ = stty("echo")
			fmt.Fprintln(stderr)
		}()
		fmt.Fprint(stderr, "Password: ")
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
