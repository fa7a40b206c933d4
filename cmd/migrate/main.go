// Command migrate applies, reverts, lists and creates Cairn's schema
// migrations.
//
//	migrate [flags] up [N]       apply pending migrations (all, or the next N)
//	migrate [flags] down [N]     revert the latest migration (or the last N)
//	migrate [flags] down --all   revert every migration and drop the schema
//	migrate [flags] status       list every migration, applied or pending
//	migrate [flags] create NAME  write NNN_NAME.up.sql and .down.sql in --dir
//
// The database comes from --database-url or DATABASE_URL, the schema from
// --schema or CAIRN_SCHEMA (default "cairn"). Flags may come before or after
// the command.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
)

// pingTimeout bounds how long we wait for the database to answer, so a
// wrong host fails instead of hanging.
const pingTimeout = 5 * time.Second

const usageText = `Usage: migrate [flags] <command> [args]

Commands:
  up [N]        apply pending migrations (all of them, or the next N)
  down [N]      revert the most recent migration (or the last N)
  down --all    revert every migration and drop the schema if left empty
  status        list every migration with its state and applied time
  create NAME   write a new pair NNN_NAME.up.sql / NNN_NAME.down.sql in --dir

Flags (before or after the command):
  --database-url URL   PostgreSQL URL or key=value DSN (env DATABASE_URL)
  --schema NAME        Postgres schema Cairn lives in (env CAIRN_SCHEMA, default "cairn")
  --dir DIR            where create writes files (default "migrations")
  --all                with down: revert every migration
  -h, --help           show this help
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it parses args, does the command and returns
// the exit code. Errors go to stderr as one line prefixed "migrate: ".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// usageError is a mistake in the command line; usage is printed after it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// options is the parsed command line.
type options struct {
	databaseURL string
	schema      string
	dir         string
	all         bool
	command     string
	args        []string
}

func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageText)
		return 0
	}
	if err == nil {
		err = execute(ctx, opts, stdout)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "migrate: "+oneLine(redact(err.Error(), opts.databaseURL)))
	if errors.As(err, new(usageError)) {
		fmt.Fprint(stderr, "\n"+usageText)
	}
	return 1
}

// parseArgs reads flags wherever they appear among the positional
// arguments.
func parseArgs(args []string, getenv func(string) string) (options, error) {
	var o options
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by runEnv
	fs.StringVar(&o.databaseURL, "database-url", getenv("DATABASE_URL"), "")
	fs.StringVar(&o.schema, "schema", cmp.Or(getenv("CAIRN_SCHEMA"), migrations.DefaultSchema), "")
	fs.StringVar(&o.dir, "dir", "migrations", "")
	fs.BoolVar(&o.all, "all", false, "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, err
			}
			return o, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) == 0 {
		return o, usagef("no command given")
	}
	o.command, o.args = pos[0], pos[1:]
	if o.all && o.command != "down" {
		return o, usagef("--all only applies to down")
	}
	return o, nil
}

func execute(ctx context.Context, o options, stdout io.Writer) error {
	switch o.command {
	case "up", "down":
		n, err := count(o)
		if err != nil {
			return err
		}
		return withRunner(ctx, o, stdout, func(r *migrations.Runner) error {
			if o.command == "up" {
				return up(ctx, r, n, o.schema, stdout)
			}
			return down(ctx, r, n, o.schema, stdout)
		})
	case "status":
		if len(o.args) > 0 {
			return usagef("status takes no arguments, got %q", strings.Join(o.args, " "))
		}
		return withRunner(ctx, o, stdout, func(r *migrations.Runner) error {
			return status(ctx, r, o.schema, stdout)
		})
	case "create":
		if len(o.args) != 1 {
			return usagef("create takes one NAME, e.g. migrate create add_tags")
		}
		upPath, downPath, err := migrations.Create(o.dir, o.args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created %s\ncreated %s\n", upPath, downPath)
		return nil
	default:
		return usagef("unknown command %q", o.command)
	}
}

// count returns the N of up/down: 0 means all for up, and for down with
// --all; down alone reverts one.
func count(o options) (int, error) {
	if len(o.args) > 1 {
		return 0, usagef("%s takes at most one count, got %q", o.command, strings.Join(o.args, " "))
	}
	if len(o.args) == 1 {
		if o.all {
			return 0, usagef("give either a count or --all, not both")
		}
		n, err := strconv.Atoi(o.args[0])
		if err != nil || n < 1 {
			return 0, usagef("bad count %q: want a whole number of 1 or more", o.args[0])
		}
		return n, nil
	}
	if o.command == "down" && !o.all {
		return 1, nil
	}
	return 0, nil
}

// withRunner connects, checks the server answers and hands fn a runner.
func withRunner(ctx context.Context, o options, stdout io.Writer, fn func(*migrations.Runner) error) error {
	if err := migrations.ValidateSchema(o.schema); err != nil {
		return err
	}
	if o.databaseURL == "" {
		return errors.New("no database: set --database-url or DATABASE_URL")
	}
	db, err := store.Open(ctx, o.databaseURL, pingTimeout)
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	defer db.Close()
	r, err := migrations.NewRunner(db, o.schema)
	if err != nil {
		return err
	}
	r.Progress = func(direction string, m migrations.Migration, took time.Duration) {
		verb := "applied"
		if direction == "down" {
			verb = "reverted"
		}
		fmt.Fprintf(stdout, "%-8s %03d_%s (%s)\n", verb, m.Version, m.Name, round(took))
	}
	return fn(r)
}

func up(ctx context.Context, r *migrations.Runner, n int, schema string, stdout io.Writer) error {
	start := time.Now()
	done, err := r.Up(ctx, n)
	if err != nil {
		return err
	}
	pending, err := r.Pending(ctx)
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintf(stdout, "nothing to apply: schema %s is up to date\n", schema)
		return nil
	}
	fmt.Fprintf(stdout, "applied %s to schema %s in %s; %d pending\n", plural(len(done)), schema, round(time.Since(start)), pending)
	return nil
}

func down(ctx context.Context, r *migrations.Runner, n int, schema string, stdout io.Writer) error {
	start := time.Now()
	done, err := r.Down(ctx, n)
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintf(stdout, "nothing to revert: no migration is applied in schema %s\n", schema)
		return nil
	}
	fmt.Fprintf(stdout, "reverted %s in schema %s in %s\n", plural(len(done)), schema, round(time.Since(start)))
	return nil
}

func status(ctx context.Context, r *migrations.Runner, schema string, stdout io.Writer) error {
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
	applied := 0
	for _, s := range st {
		state, at := "pending", "-"
		if s.Applied {
			applied++
			state, at = "applied", s.AppliedAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%03d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema %s: %d applied, %d pending\n", schema, applied, len(st)-applied)
	return nil
}

func plural(n int) string {
	if n == 1 {
		return "1 migration"
	}
	return strconv.Itoa(n) + " migrations"
}

// round keeps durations readable: milliseconds, or microseconds below 1ms.
func round(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// oneLine folds a multi-line error message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// redact hides the database URL (and so its password) wherever an error
// message repeats it.
func redact(msg, dsn string) string {
	if dsn == "" {
		return msg
	}
	return strings.ReplaceAll(msg, dsn, "<database-url>")
}
