package pgtest

import (
	"context"
	"database/sql"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// RelationChecks: the tables and views the README offers for reading, each with the check
// that holds it to the truth: a query (schema cairn) that returns a line
// for every row that disagrees with the engine's own rows, so no line
// means the relation is exact. The truth is the task rows (each task's
// status, attempt and worker, written by every transition) and, for a
// run, the rule of DESIGN.md that derives its status from its tasks: all
// tasks done -> failed (one failed), cancelled (one cancelled) or
// completed; else interrupted (one interrupted), paused, running (one
// started), pending. A base table the engine writes directly is the truth
// itself; its check holds what other rows imply of it.
var RelationChecks = map[string]string{
	"runs": `
WITH truth AS (
	SELECT r.id, r.paused, r.task_count, count(t.id) AS n,
		count(*) FILTER (WHERE t.status IN ('completed', 'failed', 'skipped', 'cancelled')) AS done,
		count(*) FILTER (WHERE t.status = 'failed') AS failed,
		count(*) FILTER (WHERE t.status = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE t.status = 'interrupted') AS interrupted,
		coalesce(bool_or(t.status NOT IN ('not_started', 'ready') OR t.attempt > 0), false) AS started
	FROM cairn.run_rows r LEFT JOIN cairn.tasks t ON t.id = ANY(r.task_ids)
	GROUP BY r.id
), want AS (
	SELECT x.*, CASE
		WHEN x.done = x.task_count THEN CASE WHEN x.failed > 0 THEN 'failed' WHEN x.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN x.interrupted > 0 THEN 'interrupted'
		WHEN x.paused THEN 'paused'
		WHEN x.started THEN 'running'
		ELSE 'pending' END AS status
	FROM truth x
)
SELECT format('run %s: status %s done %s failed %s cancelled %s interrupted %s started %s finished %s; its tasks say %s %s/%s/%s/%s started %s finished %s',
	v.id, v.status, v.done_tasks, v.failed_tasks, v.cancelled_tasks, v.interrupted_tasks, v.started_at IS NOT NULL, v.finished_at IS NOT NULL,
	w.status, w.done, w.failed, w.cancelled, w.interrupted, w.started, w.done = w.task_count)
FROM cairn.runs v FULL JOIN want w ON w.id = v.id
WHERE v.id IS NULL OR w.id IS NULL OR v.status <> w.status OR v.task_count <> w.n
	OR v.done_tasks <> w.done OR v.failed_tasks <> w.failed OR v.cancelled_tasks <> w.cancelled OR v.interrupted_tasks <> w.interrupted
	OR (v.started_at IS NOT NULL) <> w.started OR (v.finished_at IS NOT NULL) <> (w.done = w.task_count)
	OR v.finished_at < v.started_at OR v.updated_at < v.started_at
UNION ALL
SELECT format('run %s: rerun of %s from %s, not one of its tasks', r.id, r.rerun_of, r.rerun_from) FROM cairn.runs r
WHERE (r.rerun_of IS NULL) <> (r.rerun_from IS NULL)
	OR (r.rerun_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cairn.tasks t WHERE t.id = ANY(r.task_ids) AND t.name = r.rerun_from))`,
	"cairn_runs": `
SELECT format('run %s: cairn_runs and runs differ', coalesce(a.id, b.id))
FROM cairn.cairn_runs a FULL JOIN cairn.runs b ON a.id = b.id
WHERE a IS DISTINCT FROM b`,
	"tasks": `
SELECT format('task %s: %s without its worker and lease', id, status) FROM cairn.tasks
WHERE status IN ('running', 'deferred') AND (worker_id IS NULL OR lease_expires_at IS NULL)
UNION ALL
SELECT format('task %s: not in its run''s task list', t.id) FROM cairn.tasks t
WHERE NOT EXISTS (SELECT 1 FROM cairn.run_rows r WHERE r.id = t.run_id AND t.id = r.task_ids[t.idx + 1])`,
	"task_events": `
SELECT format('task %s: status %s, last event to %s', t.id, t.status, e.to_status)
FROM cairn.tasks t CROSS JOIN LATERAL (
	SELECT e.to_status FROM cairn.task_events e WHERE e.task_id = t.id ORDER BY e.id DESC LIMIT 1
) e
WHERE e.to_status <> t.status`,
	"cairn_task_counts": `
SELECT format('%s/%s %s: %s tasks, the view says %s', coalesce(a.workflow, b.workflow), coalesce(a.queue, b.queue), coalesce(a.status, b.status), a.n, b.tasks)
FROM (SELECT workflow, queue, status, count(*) AS n FROM cairn.tasks GROUP BY 1, 2, 3) a
FULL JOIN cairn.cairn_task_counts b ON (a.workflow, a.queue, a.status) = (b.workflow, b.queue, b.status)
WHERE a.n IS DISTINCT FROM b.tasks`,
	"cairn_worker_slots": `
SELECT format('worker %s: running %s deferred %s of %s slots, its tasks say %s and %s', w.worker_id, w.running, w.deferred, w.slots, t.running, t.deferred)
FROM cairn.cairn_worker_slots w CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE status = 'running') AS running, count(*) FILTER (WHERE status = 'deferred') AS deferred
	FROM cairn.tasks WHERE worker_id = w.worker_id
) t
WHERE w.running <> t.running OR w.deferred <> t.deferred OR w.running > w.slots
UNION ALL
SELECT format('worker %s: missing', id) FROM cairn.workers WHERE id NOT IN (SELECT worker_id FROM cairn.cairn_worker_slots)`,
	"workers": `
SELECT format('task %s: %s on worker %s, which has no row', t.id, t.status, t.worker_id) FROM cairn.tasks t
WHERE t.status IN ('running', 'deferred') AND NOT EXISTS (SELECT 1 FROM cairn.workers w WHERE w.id = t.worker_id)`,
	"cairn_queue_depth": `
SELECT format('queue %s: ready %s running %s deferred %s, its tasks say %s %s %s', q.queue, q.ready, q.running, q.deferred, t.ready, t.running, t.deferred)
FROM cairn.cairn_queue_depth q CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE status = 'ready') AS ready, count(*) FILTER (WHERE status = 'running') AS running,
		count(*) FILTER (WHERE status = 'deferred') AS deferred
	FROM cairn.tasks WHERE queue = q.queue
) t
WHERE (q.ready, q.running, q.deferred) <> (t.ready, t.running, t.deferred)`,
	"queues": `
SELECT format('task %s: queue %s has no row', t.id, t.queue) FROM cairn.tasks t
WHERE NOT EXISTS (SELECT 1 FROM cairn.queues q WHERE q.name = t.queue)`,
	"cairn_stuck_tasks": `
SELECT format('task %s: stuck %s, lease expired %s', coalesce(s.task_id, t.id), s.task_id IS NOT NULL, t.id IS NOT NULL)
FROM cairn.cairn_stuck_tasks s
FULL JOIN (SELECT id FROM cairn.tasks WHERE status IN ('running', 'deferred') AND lease_expires_at < now()) t ON t.id = s.task_id
WHERE s.task_id IS NULL OR t.id IS NULL`,
	"cairn_task_attempts": `
SELECT format('task %s: %s attempts listed, %s ended', t.id, coalesce(a.n, 0), t.ended)
FROM (SELECT t.id, count(e.*) FILTER (WHERE e.from_status IN ('running', 'deferred') AND e.to_status NOT IN ('running', 'deferred')) AS ended
	FROM cairn.tasks t LEFT JOIN cairn.task_events e ON e.task_id = t.id GROUP BY t.id) t
LEFT JOIN (SELECT task_id, count(*) AS n FROM cairn.cairn_task_attempts GROUP BY 1) a ON a.task_id = t.id
WHERE coalesce(a.n, 0) <> t.ended
`,
	"cairn_unroutable": `
SELECT format('%s.%s@%s in %s: listed %s, ready and served %s', coalesce(u.workflow, t.workflow), coalesce(u.task, t.name),
	coalesce(u.version, t.version), coalesce(u.queue, t.queue), u.ready, t.served)
FROM cairn.cairn_unroutable u
FULL JOIN (
	SELECT t.queue, t.workflow, t.name, t.version, bool_or(EXISTS (SELECT 1 FROM cairn.workers w WHERE w.status = 'running' AND w.queues ? t.queue
		AND (w.handles IS NULL OR t.workflow || '.' || t.name = ANY(w.handles))
		AND (t.version IS NULL OR w.versions IS NULL OR t.workflow || '@' || t.version = ANY(w.versions)))) AS served
	FROM cairn.tasks t WHERE t.status = 'ready' GROUP BY 1, 2, 3, 4
) t ON (t.queue, t.workflow, t.name) = (u.queue, u.workflow, u.task) AND t.version IS NOT DISTINCT FROM u.version
WHERE (u.queue IS NULL AND NOT t.served) OR (u.queue IS NOT NULL AND (t.queue IS NULL OR t.served))`,
	"cairn_durable_waits": `
SELECT format('task %s: listed %s, deferred in a durable wait %s', coalesce(d.task_id, t.id), d.task_id IS NOT NULL, t.id IS NOT NULL)
FROM cairn.cairn_durable_waits d
FULL JOIN (SELECT id FROM cairn.tasks WHERE status = 'deferred' AND wait_kind IS NOT NULL) t ON t.id = d.task_id
WHERE d.task_id IS NULL OR t.id IS NULL`,
	"cairn_flow_keys": `
SELECT format('key %s/%s: running %s, its tasks say %s', f.grp, f.key_value, f.running, t.n)
FROM cairn.cairn_flow_keys f JOIN cairn.flow_keys k ON k.key = f.kind || chr(31) || f.grp || chr(31) || f.key_value
CROSS JOIN LATERAL (SELECT count(*) AS n FROM cairn.tasks t WHERE t.conc_key = k.key AND t.status = 'running') t
WHERE f.running <> t.n OR (f.max_running IS NOT NULL AND t.n > f.max_running)`,
	"cairn_workflow_versions": `
WITH st AS (
	SELECT r.workflow, r.version, CASE
		WHEN count(*) FILTER (WHERE t.status IN ('completed', 'failed', 'skipped', 'cancelled')) = r.task_count THEN 'finished'
		WHEN bool_or(t.status = 'interrupted') THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN bool_or(t.status NOT IN ('not_started', 'ready') OR t.attempt > 0) THEN 'running'
		ELSE 'pending' END AS status
	FROM cairn.run_rows r JOIN cairn.tasks t ON t.id = ANY(r.task_ids)
	WHERE r.version IS NOT NULL GROUP BY r.id
), want AS (
	SELECT v.workflow, v.version,
		count(*) FILTER (WHERE s.status = 'pending') AS pending, count(*) FILTER (WHERE s.status = 'running') AS running,
		count(*) FILTER (WHERE s.status = 'paused') AS paused, count(*) FILTER (WHERE s.status = 'interrupted') AS interrupted,
		(SELECT count(*) FROM cairn.workers k WHERE k.status = 'running' AND CASE WHEN k.versions IS NOT NULL
			THEN v.workflow || '@' || v.version = ANY(k.versions)
			ELSE k.handles IS NULL OR EXISTS (SELECT 1 FROM unnest(k.handles) h WHERE starts_with(h, v.workflow || '.')) END) AS workers
	FROM cairn.workflow_versions v LEFT JOIN st s ON (s.workflow, s.version) = (v.workflow, v.version)
	GROUP BY v.workflow, v.version
)
SELECT format('%s@%s: pending %s running %s paused %s interrupted %s workers %s, its runs and workers say %s %s %s %s %s',
	coalesce(c.workflow, w.workflow), coalesce(c.version, w.version), c.pending, c.running, c.paused, c.interrupted, c.workers,
	w.pending, w.running, w.paused, w.interrupted, w.workers)
FROM cairn.cairn_workflow_versions c FULL JOIN want w ON (w.workflow, w.version) = (c.workflow, c.version)
WHERE (c.pending, c.running, c.paused, c.interrupted, c.workers) IS DISTINCT FROM (w.pending, w.running, w.paused, w.interrupted, w.workers)
	OR c.in_flight <> c.pending + c.running + c.paused + c.interrupted OR cardinality(c.worker_names) <> c.workers
	OR c.retirable <> (NOT c.newest AND c.in_flight = 0)
UNION ALL
SELECT format('%s: %s newest versions', workflow, count(*) FILTER (WHERE newest)) FROM cairn.cairn_workflow_versions
GROUP BY workflow HAVING count(*) FILTER (WHERE newest) <> 1
UNION ALL
SELECT format('run %s: a task not finished, yet no task ready, running, deferred or interrupted and no open run_deps row', r.id)
FROM cairn.run_rows r
WHERE EXISTS (SELECT 1 FROM cairn.tasks t WHERE t.id = ANY(r.task_ids) AND t.status NOT IN ('completed', 'failed', 'skipped', 'cancelled'))
	AND NOT EXISTS (SELECT 1 FROM cairn.tasks t WHERE t.id = ANY(r.task_ids) AND t.status IN ('ready', 'running', 'deferred', 'interrupted'))
	AND NOT EXISTS (SELECT 1 FROM cairn.run_deps d WHERE d.run_id = r.id AND d.status IS NULL)`,
	"flow_keys": `
SELECT format('task %s: flow key %s has no row', t.id, coalesce(t.conc_key, t.rate_key)) FROM cairn.tasks t
WHERE (t.conc_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cairn.flow_keys k WHERE k.key = t.conc_key))
	OR (t.rate_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cairn.flow_keys k WHERE k.key = t.rate_key))`,
}

// EngineTables are base tables the README offers for reading that hold
// the engine's own rows with nothing derived in them: what a reader sees
// is what the engine wrote and reads.
var EngineTables = map[string]string{
	"task_steps":        "a step's journaled result, written once by the attempt that ran it",
	"task_signals":      "a signal as sent, and which attempt consumed it",
	"schedules":         "a schedule as created or edited, with its next fire",
	"leases":            "the leader lease as taken",
	"event_listeners":   "an engine's subscription as renewed",
	"run_deps":          "the runs a run waits for (WithAfter), as enqueued",
	"task_logs":         "what a handler logged through its handle, per attempt",
	"workflow_versions": "a workflow's definition by version, as its engines registered it",
	"pending_settles":   "the runs a cancel_run from SQL finished that others wait for, until an engine decides them",
}

// CheckRelations runs every relation check in one snapshot and fails the
// test, naming the step, with the lines of any that disagree.
func CheckRelations(t testing.TB, db *sql.DB, step string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	names := make([]string, 0, len(RelationChecks))
	for name := range RelationChecks {
		names = append(names, name)
	}
	sort.Strings(names)
	var wrong []string
	for _, name := range names {
		rows, err := tx.QueryContext(ctx, RelationChecks[name])
		require.NoError(t, err, "check of %s", name)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			wrong = append(wrong, name+": "+line)
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	require.Empty(t, wrong, "%s: relations that disagree with the tasks", step)
}
