package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
)

func init() {
	commands = append(commands,
		&command{name: "workflows list", short: "List workflows and their versions: runs in flight, workers, whether a version can retire",
			do: workflowsList},
		&command{name: "workflows show", args: "WORKFLOW", nargs: 1,
			short: "Show a workflow: its tasks, and its versions with their runs and workers", do: workflowsShow},
	)
}

// workflowOut is a workflow as GET /api/workflows describes it.
type workflowOut struct {
	Name    string  `json:"name"`
	Version *string `json:"version"`
	Queue   string  `json:"queue"`
	Tasks   []struct {
		Name        string          `json:"name"`
		Deps        []string        `json:"deps"`
		Queue       string          `json:"queue"`
		MaxAttempts int             `json:"max_attempts"`
		Timeout     string          `json:"timeout"`
		Trigger     json.RawMessage `json:"trigger"`
		Workers     []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"workers"`
	} `json:"tasks"`
	RunsURL  string `json:"runs_url"`
	Versions []struct {
		Version string `json:"version"`
		Tasks   []struct {
			Name string `json:"name"`
		} `json:"tasks"`
		Compatible []string `json:"compatible"`
		Runs       struct {
			Pending     int64 `json:"pending"`
			Running     int64 `json:"running"`
			Paused      int64 `json:"paused"`
			Interrupted int64 `json:"interrupted"`
			InFlight    int64 `json:"in_flight"`
		} `json:"runs"`
		Workers   []string `json:"workers"`
		Newest    bool     `json:"newest"`
		Retirable bool     `json:"retirable"`
	} `json:"versions"`
}

// versionState says how a version's deploy stands.
func versionState(newest, retirable bool, inFlight int64, workers int) string {
	s := "draining"
	switch {
	case newest:
		s = "current"
	case retirable:
		return "retirable"
	}
	if inFlight > 0 && workers == 0 {
		s += ", unserved"
	}
	return s
}

func workflowsList(ctx context.Context, c *cli, _ opts, _ []string) error {
	body, err := c.client.get(ctx, "/api/workflows", nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var out struct {
		Definitions []workflowOut `json:"definitions"`
	}
	if err := decode(body, &out); err != nil {
		return err
	}
	tw := c.table("WORKFLOW", "VERSION", "TASKS", "IN FLIGHT", "WORKERS", "STATE")
	for _, w := range out.Definitions {
		if len(w.Versions) == 0 {
			row(tw, w.Name, "-", len(w.Tasks), "-", "-", "not stored")
		}
		for _, v := range w.Versions {
			row(tw, w.Name, v.Version, len(v.Tasks), v.Runs.InFlight, len(v.Workers),
				versionState(v.Newest, v.Retirable, v.Runs.InFlight, len(v.Workers)))
		}
	}
	return tw.Flush()
}

func workflowsShow(ctx context.Context, c *cli, _ opts, args []string) error {
	body, err := c.client.get(ctx, "/api/workflows/"+url.PathEscape(args[0]), nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(body)
	}
	var w workflowOut
	if err := decode(body, &w); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Workflow\t%s\n", w.Name)
	fmt.Fprintf(tw, "Version\t%s\n", cmpStr(deref(w.Version), "not stored"))
	fmt.Fprintf(tw, "Queue\t%s\n", w.Queue)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	tt := c.table("TASK", "DEPENDS ON", "QUEUE", "ATTEMPTS", "TIMEOUT", "TRIGGER", "WORKERS")
	for _, t := range w.Tasks {
		names := make([]string, len(t.Workers))
		for i, k := range t.Workers {
			names[i] = k.Name + " #" + strconv.FormatInt(k.ID, 10)
		}
		var trigger struct {
			Shorthand string `json:"shorthand"`
		}
		_ = json.Unmarshal(t.Trigger, &trigger)
		row(tt, t.Name, strings.Join(t.Deps, ","), t.Queue, t.MaxAttempts, t.Timeout, cmpStr(trigger.Shorthand, compact(t.Trigger)), strings.Join(names, ", "))
	}
	if err := tt.Flush(); err != nil {
		return err
	}
	if len(w.Versions) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	vt := c.table("VERSION", "TASKS", "PENDING", "RUNNING", "PAUSED", "INTERRUPTED", "WORKERS", "STATE")
	for _, v := range w.Versions {
		tasks := make([]string, len(v.Tasks))
		for i, t := range v.Tasks {
			tasks[i] = t.Name
		}
		row(vt, v.Version, strings.Join(tasks, ","), v.Runs.Pending, v.Runs.Running, v.Runs.Paused, v.Runs.Interrupted,
			strings.Join(v.Workers, ", "), versionState(v.Newest, v.Retirable, v.Runs.InFlight, len(v.Workers)))
	}
	return vt.Flush()
}
