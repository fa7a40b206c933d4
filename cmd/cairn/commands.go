package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	commands = append(commands,
		&command{name: "runs list", args: "[--status S] [--workflow W] [--search Q] [--limit N]",
			short: "List runs, newest first", flags: runsListFlags, do: runsList},
		&command{name: "runs show", args: "RUN", nargs: 1,
			short: "Show a run and its tasks", do: runsShow},
		&command{name: "runs enqueue", args: "WORKFLOW [--input JSON|@file|@-] [--key K]", nargs: 1,
			short: "Start a run of a workflow", flags: enqueueFlags, do: runsEnqueue},
		&command{name: "runs wait", args: "RUN [--timeout D]", nargs: 1,
			short: "Wait until a run ends; the exit code says how (0 completed, 3 failed, 4 cancelled, 5 interrupted)",
			flags: func(fs *flag.FlagSet) {
				fs.Duration("timeout", 0, "give up after `D` (exit 1; default: wait as long as it takes)")
			}, do: runsWait},
		runAction("cancel", "Cancel a run and its unfinished tasks"),
		runAction("pause", "Pause a run: its tasks are not claimed until resumed"),
		runAction("resume", "Resume a paused run"),
		runAction("retry", "Retry a run: its failed and cancelled tasks, and those skipped below them, start over"),
		&command{name: "runs requeue", args: "RUN", nargs: 1,
			short: "Requeue a run: its interrupted tasks go back to ready", do: runsRequeue},
		&command{name: "runs rerun", args: "RUN --from TASK [--input JSON|@file|@-]", nargs: 1,
			short: "Start a new run of a finished run from one of its tasks, the tasks upstream keeping their outputs",
			flags: func(fs *flag.FlagSet) {
				fs.String("from", "", "the `task` to rerun from (required)")
				fs.String("input", "", "the new run's input: JSON, @file, @- for stdin (default: the run's)")
			}, do: runsRerun},
		&command{name: "tasks show", args: "TASK", nargs: 1,
			short: "Show a task: its status, attempts, errors and output", do: tasksShow},
		taskAction("retry", "Send a failed task back to ready"),
		taskAction("requeue", "Send an interrupted task back to ready"),
		taskAction("cancel", "Cancel a task"),
		&command{name: "tasks signal", args: "TASK NAME [--payload JSON|@file|@-]", nargs: 2,
			short: "Send a named signal, with an optional payload, to a task", flags: signalFlags, do: tasksSignal},
		&command{name: "queues list", short: "List queues with their depth, pause state and cap", do: queuesList},
		queueAction("pause", "Pause a queue: no task of it is claimed until resumed"),
		queueAction("resume", "Resume a paused queue"),
		&command{name: "queues cap", args: "QUEUE N|none", nargs: 2,
			short: "Cap the tasks of a queue running at once, cluster-wide (none: no cap)", do: queuesCap},
		&command{name: "schedules list", short: "List schedules and their next fires", do: schedulesList},
		scheduleAction("pause", "Pause a schedule"),
		scheduleAction("resume", "Resume a paused schedule"),
		scheduleAction("fire", "Fire a schedule now: enqueue one run"),
		&command{name: "workers", args: "[--limit N]", short: "List workers with their slot use",
			flags: func(fs *flag.FlagSet) { fs.Int("limit", 0, "show at most `N` workers (default: the server's)") }, do: workersList},
	)
}

// runsListFlags are the filters of `runs list`.
func runsListFlags(fs *flag.FlagSet) {
	fs.String("status", "", "only runs with this `status` (pending, running, paused, completed, failed, cancelled, interrupted)")
	fs.String("workflow", "", "only runs of this `workflow`")
	fs.String("search", "", "only runs whose input matches `key:value` terms (order.id:42 customer:acme)")
	fs.String("from", "", "only runs created at or after this `time` (RFC 3339 or 2024-05-01T14:30, UTC)")
	fs.String("to", "", "only runs created before this `time`")
	fs.Int("limit", 0, "show at most `N` runs (default 50, at most 500)")
	fs.String("after", "", "the next page: the `cursor` a previous list printed")
}

type runRow struct {
	ID             int64           `json:"id"`
	Workflow       string          `json:"workflow"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input"`
	IdempotencyKey *string         `json:"idempotency_key"`
	Queue          string          `json:"queue"`
	Priority       int             `json:"priority"`
	TaskCount      int             `json:"task_count"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	TasksDone      int             `json:"tasks_done"`
	TasksFailed    int             `json:"tasks_failed"`
	TasksActive    int             `json:"tasks_active"`
	ParentTaskID   *int64          `json:"parent_task_id"`
}

func runsList(ctx context.Context, c *cli, o opts, _ []string) error {
	q := url.Values{}
	for flagName, param := range map[string]string{"status": "status", "workflow": "workflow", "search": "q", "from": "from", "to": "to", "after": "after"} {
		if v := o.str(flagName); v != "" {
			q.Set(param, v)
		}
	}
	if o.given("limit") {
		q.Set("limit", strconv.Itoa(o.int("limit")))
	}
	body, err := c.client.get(ctx, "/api/runs", q)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Runs       []runRow `json:"runs"`
		NextCursor string   `json:"next_cursor"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	tw := c.table("ID", "WORKFLOW", "STATUS", "TASKS", "FAILED", "CREATED", "KEY")
	for _, r := range out.Runs {
		row(tw, r.ID, r.Workflow, r.Status, fmt.Sprintf("%d/%d", r.TasksDone, r.TaskCount), r.TasksFailed, when(&r.CreatedAt), deref(r.IdempotencyKey))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Runs) == 0 {
		fmt.Fprintln(c.stderr, "no runs match")
	}
	if out.NextCursor != "" {
		fmt.Fprintf(c.stderr, "more runs: add --after %s\n", out.NextCursor)
	}
	return nil
}

type taskRow struct {
	ID          int64           `json:"id"`
	Name        string          `json:"name"`
	Status      string          `json:"status"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Queue       string          `json:"queue"`
	LastError   *string         `json:"last_error"`
	WaitKind    *string         `json:"wait_kind"`
	WaitName    *string         `json:"wait_name"`
	Output      json.RawMessage `json:"output"`
}

// runWaitPoll is how long one request of `runs wait` asks the server to
// wait (GET /api/runs/{id}?wait=), within the client's request timeout.
const runWaitPoll = 25 * time.Second

// runsWait long-polls the run until it has ended, prints it as `runs show`
// does, and ends with its outcome.
func runsWait(ctx context.Context, c *cli, o opts, args []string) error {
	id, err := parseID(c.cmd, "run", args[0])
	if err != nil {
		return err
	}
	if d := o.fs.Lookup("timeout").Value.(flag.Getter).Get().(time.Duration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	path := "/api/runs/" + strconv.FormatInt(id, 10)
	for {
		wait := runWaitPoll
		if deadline, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(deadline).Round(time.Millisecond))
		}
		if wait <= 0 {
			return fmt.Errorf("run %d has not ended: gave up after --timeout", id)
		}
		body, err := c.client.get(ctx, path, url.Values{"wait": {wait.String()}})
		if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
			return fmt.Errorf("run %d has not ended: gave up after --timeout", id)
		}
		if err != nil {
			return err
		}
		var out struct {
			Run runRow `json:"run"`
		}
		if err := decode(body, &out); err != nil {
			return err
		}
		code, ended := runOutcome(out.Run.Status)
		if !ended {
			continue
		}
		if err := runsShow(ctx, c, o, args); err != nil {
			return err
		}
		if code != exitOK {
			return &exitCodeError{code: code, msg: fmt.Sprintf("run %d %s", id, out.Run.Status)}
		}
		return nil
	}
}

// runOutcome is the exit code of `runs wait` for a run in status, and
// whether the run has ended.
func runOutcome(status string) (int, bool) {
	switch status {
	case "completed":
		return exitOK, true
	case "failed":
		return exitRunFailed, true
	case "cancelled":
		return exitRunCancelled, true
	case "interrupted":
		return exitRunInterrupted, true
	}
	return 0, false
}

func runsShow(ctx context.Context, c *cli, _ opts, args []string) error {
	id, err := parseID(c.cmd, "run", args[0])
	if err != nil {
		return err
	}
	body, err := c.client.get(ctx, "/api/runs/"+strconv.FormatInt(id, 10), nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Run   runRow    `json:"run"`
		Tasks []taskRow `json:"tasks"`
		After []struct {
			Run    int64   `json:"run"`
			Status *string `json:"status"`
		} `json:"after"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	r := out.Run
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Run\t%d\n", r.ID)
	fmt.Fprintf(tw, "Workflow\t%s\n", r.Workflow)
	fmt.Fprintf(tw, "Status\t%s\n", r.Status)
	fmt.Fprintf(tw, "Queue\t%s (priority %d)\n", r.Queue, r.Priority)
	if r.IdempotencyKey != nil {
		fmt.Fprintf(tw, "Key\t%s\n", *r.IdempotencyKey)
	}
	if r.ParentTaskID != nil {
		fmt.Fprintf(tw, "Parent task\t%d\n", *r.ParentTaskID)
	}
	for _, a := range out.After {
		fmt.Fprintf(tw, "After run\t%d (%s)\n", a.Run, cmpStr(deref(a.Status), "gone"))
	}
	fmt.Fprintf(tw, "Created\t%s\n", when(&r.CreatedAt))
	fmt.Fprintf(tw, "Started\t%s\n", when(r.StartedAt))
	fmt.Fprintf(tw, "Finished\t%s\n", when(r.FinishedAt))
	fmt.Fprintf(tw, "Input\t%s\n", compact(r.Input))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	tt := c.table("TASK", "NAME", "STATUS", "ATTEMPT", "QUEUE", "WAITING FOR", "LAST ERROR")
	for _, t := range out.Tasks {
		wait := ""
		if t.WaitKind != nil {
			wait = *t.WaitKind
			if t.WaitName != nil {
				wait += " " + *t.WaitName
			}
		}
		row(tt, t.ID, t.Name, t.Status, fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), t.Queue, cmpStr(wait, "-"), oneLine(deref(t.LastError), 80))
	}
	return tt.Flush()
}

// runsRequeue is the bulk requeue of the API for one run; a run with no
// interrupted task is an error.
func runsRequeue(ctx context.Context, c *cli, _ opts, args []string) error {
	id, err := parseID(c.cmd, "run", args[0])
	if err != nil {
		return err
	}
	body, err := c.client.post(ctx, "/api/runs/bulk", map[string]any{"action": "requeue", "ids": []int64{id}})
	if err != nil {
		return err
	}
	var out struct {
		Done int `json:"done"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	if c.json {
		if err := c.raw(body); err != nil {
			return err
		}
	}
	if out.Done == 0 {
		return fmt.Errorf("run %d has no interrupted task to requeue (or does not exist)", id)
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "Run #%d requeued: its interrupted tasks are ready again.\n", id)
	}
	return nil
}

// attemptRow is an attempt of GET /api/tasks/{id}.
type attemptRow struct {
	Attempt   int        `json:"attempt"`
	WorkerID  *int64     `json:"worker_id"`
	Outcome   string     `json:"outcome"`
	StartedAt *time.Time `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	Error     *string    `json:"error"`
}

func tasksShow(ctx context.Context, c *cli, _ opts, args []string) error {
	id, err := parseID(c.cmd, "task", args[0])
	if err != nil {
		return err
	}
	body, err := c.client.get(ctx, "/api/tasks/"+strconv.FormatInt(id, 10), nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Task struct {
			taskRow
			RunID      int64      `json:"run_id"`
			Workflow   string     `json:"workflow"`
			WorkerID   *int64     `json:"worker_id"`
			StartedAt  *time.Time `json:"started_at"`
			FinishedAt *time.Time `json:"finished_at"`
		} `json:"task"`
		Attempts []attemptRow `json:"attempts"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	t := out.Task
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Task\t%d\n", t.ID)
	fmt.Fprintf(tw, "Run\t%d\n", t.RunID)
	fmt.Fprintf(tw, "Workflow\t%s\n", t.Workflow)
	fmt.Fprintf(tw, "Name\t%s\n", t.Name)
	fmt.Fprintf(tw, "Status\t%s\n", t.Status)
	fmt.Fprintf(tw, "Attempts\t%d/%d\n", t.Attempt, t.MaxAttempts)
	fmt.Fprintf(tw, "Queue\t%s\n", t.Queue)
	if t.WorkerID != nil {
		fmt.Fprintf(tw, "Worker\t%d\n", *t.WorkerID)
	}
	fmt.Fprintf(tw, "Started\t%s\n", when(t.StartedAt))
	fmt.Fprintf(tw, "Finished\t%s\n", when(t.FinishedAt))
	if t.LastError != nil {
		fmt.Fprintf(tw, "Last error\t%s\n", oneLine(*t.LastError, 200))
	}
	fmt.Fprintf(tw, "Output\t%s\n", cmpStr(compact(t.Output), "-"))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	at := c.table("ATTEMPT", "OUTCOME", "WORKER", "STARTED", "ENDED", "ERROR")
	for _, a := range out.Attempts {
		worker := "-"
		if a.WorkerID != nil {
			worker = strconv.FormatInt(*a.WorkerID, 10)
		}
		row(at, a.Attempt, a.Outcome, worker, when(a.StartedAt), when(a.EndedAt), cmpStr(oneLine(deref(a.Error), 80), "-"))
	}
	return at.Flush()
}

func enqueueFlags(fs *flag.FlagSet) {
	fs.String("input", "", "the run's input: JSON, @file to read it from a file, @- from stdin (default {})")
	fs.String("key", "", "idempotency `key`: while a run holds it, enqueueing again returns that run")
	fs.String("queue", "", "enqueue on this `queue` instead of the workflow's")
	fs.Int("priority", 0, "`priority` of the run's tasks (lower runs first)")
	fs.String("unique-for", "", "keep the key held this long after the run starts, whatever its state (`duration`: 24h, 90m)")
	fs.String("debounce", "", "debounce `key`: while its run has not started, enqueueing again replaces its input and moves its start (needs --wait, --max-wait)")
	fs.String("wait", "", "with --debounce: start the run this long after the latest enqueue (`duration`: 2s)")
	fs.String("max-wait", "", "with --debounce: start it at the latest this long after the first (`duration`: 1m)")
	fs.String("singleton", "", "singleton `key`: while its run has not started, enqueueing again replaces its input")
}

func runsEnqueue(ctx context.Context, c *cli, o opts, args []string) error {
	req := map[string]any{"workflow": args[0]}
	if o.given("input") {
		input, err := c.jsonArg(c.cmd, "input", o.str("input"))
		if err != nil {
			return err
		}
		req["input"] = input
	}
	for _, f := range []string{"key", "queue"} {
		if v := o.str(f); v != "" {
			req[f] = v
		}
	}
	if v := o.str("unique-for"); v != "" {
		req["unique_for"] = v
	}
	if v := o.str("debounce"); v != "" {
		req["debounce"] = map[string]string{"key": v, "wait": o.str("wait"), "max_wait": o.str("max-wait")}
	}
	if v := o.str("singleton"); v != "" {
		req["singleton"] = v
	}
	if o.given("priority") {
		req["priority"] = o.int("priority")
	}
	body, err := c.client.post(ctx, "/api/runs", req)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		ID       int64  `json:"id"`
		Workflow string `json:"workflow"`
		Existing bool   `json:"existing"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	if key := cmp.Or(o.str("debounce"), o.str("singleton")); out.Existing && key != "" && o.str("key") == "" {
		fmt.Fprintf(c.stdout, "run %d of %s had not started: its input replaced (key %s)\n", out.ID, out.Workflow, key)
		return nil
	}
	if out.Existing {
		fmt.Fprintf(c.stdout, "run %d of %s already holds key %s\n", out.ID, out.Workflow, o.str("key"))
		return nil
	}
	fmt.Fprintf(c.stdout, "enqueued run %d of %s\n", out.ID, out.Workflow)
	return nil
}

func runsRerun(ctx context.Context, c *cli, o opts, args []string) error {
	id, err := parseID(c.cmd, "run", args[0])
	if err != nil {
		return err
	}
	if o.str("from") == "" {
		return usagef(c.cmd, "--from: the task to rerun from is required")
	}
	req := map[string]any{"task": o.str("from")}
	if o.given("input") {
		if req["input"], err = c.jsonArg(c.cmd, "input", o.str("input")); err != nil {
			return err
		}
	}
	body, err := c.client.post(ctx, "/api/runs/"+strconv.FormatInt(id, 10)+"/rerun", req)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		ID       int64  `json:"id"`
		Workflow string `json:"workflow"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "rerun of run %d from task %s: run %d of %s\n", id, o.str("from"), out.ID, out.Workflow)
	return nil
}

// jsonArg reads a JSON flag value: the text itself, @file, or @- for
// stdin. Text that is not JSON is a usage error.
func (c *cli) jsonArg(cmd *command, flagName, v string) (json.RawMessage, error) {
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if name == "-" {
			b, err = io.ReadAll(io.LimitReader(c.env.stdin, maxResponse))
		} else {
			b, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("--%s: read %s: %w", flagName, name, err)
		}
	}
	if !json.Valid(b) {
		return nil, usagef(cmd, "--%s: not valid JSON: %s", flagName, oneLine(string(b), 60))
	}
	return json.RawMessage(b), nil
}

// runAction, taskAction, queueAction and scheduleAction are the commands
// that POST an action of the API and print its message.
func runAction(verb, short string) *command {
	return idAction("runs", "run", verb, short)
}

func taskAction(verb, short string) *command {
	return idAction("tasks", "task", verb, short)
}

func idAction(group, what, verb, short string) *command {
	name := group + " " + verb
	return &command{name: name, args: strings.ToUpper(what), nargs: 1, short: short,
		do: func(ctx context.Context, c *cli, _ opts, args []string) error {
			id, err := parseID(c.cmd, what, args[0])
			if err != nil {
				return err
			}
			return c.action(ctx, "/api/"+group+"/"+strconv.FormatInt(id, 10)+"/"+verb, nil)
		}}
}

func queueAction(verb, short string) *command {
	return nameAction("queues", "QUEUE", verb, short)
}

func scheduleAction(verb, short string) *command {
	return nameAction("schedules", "SCHEDULE", verb, short)
}

func nameAction(group, arg, verb, short string) *command {
	return &command{name: group + " " + verb, args: arg, nargs: 1, short: short,
		do: func(ctx context.Context, c *cli, _ opts, args []string) error {
			return c.action(ctx, "/api/"+group+"/"+url.PathEscape(args[0])+"/"+verb, nil)
		}}
}

// action POSTs an action and prints the API's message.
func (c *cli) action(ctx context.Context, path string, body any) error {
	b, err := c.client.post(ctx, path, body)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(b)
	}
	var out struct {
		Message string `json:"message"`
	}
	if err := decode(b, &out); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, out.Message)
	return nil
}

func signalFlags(fs *flag.FlagSet) {
	fs.String("payload", "", "the signal's payload: JSON, @file or @- for stdin (default null)")
}

func tasksSignal(ctx context.Context, c *cli, o opts, args []string) error {
	id, err := parseID(c.cmd, "task", args[0])
	if err != nil {
		return err
	}
	req := map[string]any{"name": args[1]}
	if o.given("payload") {
		p, err := c.jsonArg(c.cmd, "payload", o.str("payload"))
		if err != nil {
			return err
		}
		req["payload"] = p
	}
	return c.action(ctx, "/api/tasks/"+strconv.FormatInt(id, 10)+"/signal", req)
}

func queuesCap(ctx context.Context, c *cli, _ opts, args []string) error {
	var limit *int
	switch v := strings.ToLower(args[1]); v {
	case "none", "off":
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return usagef(c.cmd, "cap %q: must be a whole number ≥ 0, or none", args[1])
		}
		limit = &n
	}
	return c.action(ctx, "/api/queues/"+url.PathEscape(args[0])+"/cap", map[string]any{"max_running": limit})
}

func queuesList(ctx context.Context, c *cli, _ opts, _ []string) error {
	body, err := c.client.get(ctx, "/api/queues", nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Queues []struct {
			Name       string `json:"name"`
			Paused     bool   `json:"paused"`
			MaxRunning *int   `json:"max_running"`
			Ready      int64  `json:"ready"`
			Running    int64  `json:"running"`
			Deferred   int64  `json:"deferred"`
			Workers    int64  `json:"workers"`
			Slots      int64  `json:"slots"`
		} `json:"queues"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	tw := c.table("QUEUE", "STATE", "CAP", "READY", "RUNNING", "DEFERRED", "WORKERS", "SLOTS")
	for _, q := range out.Queues {
		limit := "none"
		if q.MaxRunning != nil {
			limit = strconv.Itoa(*q.MaxRunning)
		}
		row(tw, q.Name, pausedState(q.Paused), limit, q.Ready, q.Running, q.Deferred, q.Workers, q.Slots)
	}
	return tw.Flush()
}

func schedulesList(ctx context.Context, c *cli, _ opts, _ []string) error {
	body, err := c.client.get(ctx, "/api/schedules", nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Schedules []struct {
			Name       string     `json:"name"`
			Expression string     `json:"expression"`
			Timezone   string     `json:"timezone"`
			Workflow   string     `json:"workflow"`
			Paused     bool       `json:"paused"`
			NextFireAt time.Time  `json:"next_fire_at"`
			LastFireAt *time.Time `json:"last_fire_at"`
			LastRunID  *int64     `json:"last_run_id"`
		} `json:"schedules"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	tw := c.table("SCHEDULE", "WORKFLOW", "EXPRESSION", "TIMEZONE", "STATE", "NEXT FIRE", "LAST FIRE", "LAST RUN")
	for _, s := range out.Schedules {
		next := when(&s.NextFireAt)
		if s.Paused {
			next = "-"
		}
		last := "-"
		if s.LastRunID != nil {
			last = strconv.FormatInt(*s.LastRunID, 10)
		}
		row(tw, s.Name, s.Workflow, s.Expression, s.Timezone, pausedState(s.Paused), next, when(s.LastFireAt), last)
	}
	return tw.Flush()
}

func workersList(ctx context.Context, c *cli, o opts, _ []string) error {
	q := url.Values{}
	if o.given("limit") {
		q.Set("limit", strconv.Itoa(o.int("limit")))
	}
	body, err := c.client.get(ctx, "/api/workers", q)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Workers []struct {
			ID           int64          `json:"id"`
			Name         string         `json:"name"`
			Status       string         `json:"status"`
			Slots        int            `json:"slots"`
			Running      int            `json:"running"`
			Deferred     int            `json:"deferred"`
			Queues       map[string]int `json:"queues"`
			HeartbeatAge float64        `json:"heartbeat_age_seconds"`
		} `json:"workers"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	tw := c.table("WORKER", "NAME", "STATUS", "RUNNING", "DEFERRED", "SLOTS", "QUEUES", "HEARTBEAT")
	for _, w := range out.Workers {
		age := time.Duration(w.HeartbeatAge * float64(time.Second)).Round(time.Second)
		row(tw, w.ID, w.Name, w.Status, w.Running, w.Deferred, w.Slots, queueSlots(w.Queues), age.String()+" ago")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Workers) == 0 {
		fmt.Fprintln(c.stderr, "no workers")
	}
	return nil
}
