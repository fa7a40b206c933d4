// Command cairn is an operator's command line over the JSON API of a
// Cairn server (cmd/server): list and inspect runs, enqueue, retry,
// requeue, cancel and signal tasks, pause and cap queues, manage
// schedules, list workers and watch task transitions live.
//
// Run `cairn help` for the commands. The server's address comes from
// --url or CAIRN_URL, its password from CAIRN_PASSWORD or a prompt.
// Exit codes: 0 ok, 1 error (network, or the API refused), 2 usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT ends `cairn watch` cleanly (exit 0) and interrupts a request
	// of the other commands (exit 1).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], systemEnv(ctx), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
