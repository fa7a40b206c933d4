package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // network, or the API refused the request
	exitUsage = 2 // unknown command or flag, missing or bad argument
	// `runs wait` ends with the run's outcome.
	exitRunFailed      = 3
	exitRunCancelled   = 4
	exitRunInterrupted = 5
)

// exitCodeError ends the command with its code and message (a run's
// outcome, for `runs wait`).
type exitCodeError struct {
	code int
	msg  string
}

func (e *exitCodeError) Error() string { return e.msg }

// defaultURL is where cmd/server listens unless told otherwise.
const defaultURL = "http://127.0.0.1:8080"

// env is what the command reads from its surroundings, so that tests can
// give their own.
type env struct {
	getenv func(string) string
	// stdin is read by --input @- and --payload @-.
	stdin io.Reader
	// prompt asks for the password on the terminal; nil when stdin is
	// not a terminal.
	prompt func() (string, error)
}

// systemEnv is the process's environment, stdin and terminal.
func systemEnv(ctx context.Context) env {
	return env{getenv: os.Getenv, stdin: os.Stdin, prompt: terminalPrompt(ctx, os.Stdin, os.Stderr)}
}

// usageError is a mistake in the command line: exit 2 with the usage of
// the command it concerns (nil: the list of commands).
type usageError struct {
	msg string
	cmd *command
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd *command, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), cmd: cmd}
}

// cli is one invocation: the global options, the API client and where
// output goes.
type cli struct {
	env    env
	stdout io.Writer
	stderr io.Writer

	url    string // --url; "" until resolved
	json   bool   // --json: print the API's JSON
	client *client
	cmd    *command // the command being run
}

// command is one leaf of the command tree.
type command struct {
	name  string // "runs list"
	args  string // synopsis of the positional arguments and flags
	short string
	// flags declares the command's own flags; nil when it has none.
	flags func(fs *flag.FlagSet)
	// nargs is how many positional arguments it takes.
	nargs int
	do    func(ctx context.Context, c *cli, f opts, args []string) error
}

// opts reads the values of a command's own flags.
type opts struct{ fs *flag.FlagSet }

func (o opts) str(name string) string { return o.fs.Lookup(name).Value.String() }

func (o opts) int(name string) int { return o.fs.Lookup(name).Value.(flag.Getter).Get().(int) }

// given reports whether the flag was on the command line.
func (o opts) given(name string) bool {
	found := false
	o.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// commands is filled in by init (commands.go, watch.go) so that the
// command functions can refer to the table for their usage.
var commands []*command

func findCommand(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

// groups lists the first words that have sub-commands.
func groups() map[string][]string {
	g := map[string][]string{}
	for _, cmd := range commands {
		if head, tail, ok := strings.Cut(cmd.name, " "); ok {
			g[head] = append(g[head], tail)
		}
	}
	return g
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	c := &cli{env: e, stdout: stdout, stderr: stderr}
	err := c.run(ctx, args)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "cairn:", ue.msg)
		if ue.cmd != nil {
			c.commandUsage(stderr, ue.cmd)
		} else {
			c.usage(stderr)
		}
		return exitUsage
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, "cairn:", err)
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	return exitError
}

func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "server `URL` (env CAIRN_URL; default "+defaultURL+")")
	fs.BoolVar(&c.json, "json", c.json, "print the API's JSON instead of a table")
}

func (c *cli) run(ctx context.Context, args []string) error {
	root := flag.NewFlagSet("cairn", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	c.globalFlags(root)
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return err
		}
		return usagef(nil, "%v", err)
	}
	args = root.Args()
	if len(args) == 0 {
		return usagef(nil, "no command given")
	}
	if args[0] == "help" {
		return c.help(args[1:])
	}
	cmd, rest, err := c.lookup(args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("cairn "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.commandUsage(c.stdout, cmd)
			return err
		}
		return usagef(cmd, "%v", err)
	}
	if len(pos) < cmd.nargs {
		return usagef(cmd, "%s: missing argument (%s)", cmd.name, strings.Join(strings.Fields(cmd.args)[:cmd.nargs], " "))
	}
	if len(pos) > cmd.nargs {
		return usagef(cmd, "%s: unexpected argument %q", cmd.name, pos[cmd.nargs])
	}
	if err := c.connect(); err != nil {
		return err
	}
	c.cmd = cmd
	return cmd.do(ctx, c, opts{fs}, pos)
}

// lookup finds the command named by the first one or two words of args.
func (c *cli) lookup(args []string) (*command, []string, error) {
	if cmd := findCommand(args[0]); cmd != nil {
		return cmd, args[1:], nil
	}
	subs, ok := groups()[args[0]]
	if !ok {
		return nil, nil, usagef(nil, "unknown command %q", args[0])
	}
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		return nil, nil, usagef(nil, "%s: give one of: %s", args[0], strings.Join(subs, ", "))
	}
	cmd := findCommand(args[0] + " " + args[1])
	if cmd == nil {
		return nil, nil, usagef(nil, "unknown command %q: %s takes one of: %s", args[0]+" "+args[1], args[0], strings.Join(subs, ", "))
	}
	return cmd, args[2:], nil
}

// help prints the list of commands, or one command's usage.
func (c *cli) help(args []string) error {
	if len(args) == 0 {
		c.usage(c.stdout)
		return nil
	}
	name := strings.Join(args, " ")
	if cmd := findCommand(name); cmd != nil {
		c.commandUsage(c.stdout, cmd)
		return nil
	}
	if _, ok := groups()[name]; ok {
		c.usage(c.stdout)
		return nil
	}
	return usagef(nil, "help: unknown command %q", name)
}

// connect resolves the server URL and makes the API client.
func (c *cli) connect() error {
	raw := c.url
	if raw == "" {
		raw = c.env.getenv("CAIRN_URL")
	}
	if raw == "" {
		raw = defaultURL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return usagef(nil, "server URL %q: must look like http://host:port (from --url or CAIRN_URL)", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	user := c.env.getenv("CAIRN_USER")
	if user == "" {
		user = c.env.getenv("USER")
	}
	if user == "" {
		user = "cli"
	}
	c.client = newClient(u, user, c.env.getenv("CAIRN_PASSWORD"), c.env.prompt)
	return nil
}

// parseInterleaved parses fs from args, letting flags come after
// positional arguments too (cairn runs enqueue etl --key k), and returns
// the positional arguments. After "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

const usageHead = `cairn is the command line of a Cairn server's JSON API.

Usage: cairn [--url URL] [--json] <command> [arguments] [flags]

Commands:
`

const usageTail = `
Global flags (before or after the command):
  --url URL   server URL (env CAIRN_URL; default ` + defaultURL + `)
  --json      print the API's JSON instead of a table
  -h, --help  show help; "cairn help <command>" shows one command's flags

Environment:
  CAIRN_URL       the server URL, when --url is not given
  CAIRN_PASSWORD  the admin (or read-only) password; without it cairn asks
                  on the terminal when the server wants one
  CAIRN_USER      the user name the server records for your actions
                  (default $USER)

Exit codes: 0 ok, 1 error (network, or the API refused: its message is
printed), 2 usage (unknown command or flag, missing or bad argument);
runs wait: 3 the run failed, 4 cancelled, 5 interrupted.
`

// usage prints the list of commands.
func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, cmd := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", cmd.name, cmd.args, cmd.short)
	}
	_ = tw.Flush()
	fmt.Fprint(w, usageTail)
}

// commandUsage prints one command's synopsis and flags.
func (c *cli) commandUsage(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "Usage: cairn %s %s\n\n%s\n\nFlags:\n", cmd.name, cmd.args, cmd.short)
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	var scratch cli
	scratch.globalFlags(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fmt.Fprint(w, strings.TrimRight(b.String(), "\n")+"\n")
}

// parseID reads a positive run or task id.
func parseID(cmd *command, what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef(cmd, "%s id %q: must be a positive whole number", what, s)
	}
	return id, nil
}
