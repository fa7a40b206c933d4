-- Cairn's base schema. Migrations run with search_path set to the engine's
-- schema (default "cairn"), so every name here lands in that schema.

-- workers: one row per engine process.
CREATE TABLE workers (
    id           bigserial PRIMARY KEY,                 -- worker id, carried by the tasks it runs
    name         text        NOT NULL,                  -- host:pid/random, for people
    queues       jsonb       NOT NULL DEFAULT '{}',     -- {"queue": slots} this worker serves
    slots        integer     NOT NULL CHECK (slots >= 0), -- total slot capacity (sum over queues)
    status       text        NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'stopping', 'stopped', 'lost')), -- lifecycle of the process
    started_at   timestamptz NOT NULL DEFAULT now(),    -- when the process registered
    heartbeat_at timestamptz NOT NULL DEFAULT now(),    -- last heartbeat; old means dead
    stopped_at   timestamptz                            -- when it shut down (or was found lost)
);
CREATE INDEX workers_status_heartbeat ON workers (status, heartbeat_at);

-- queues: named streams of tasks; a row is created on first use.
CREATE TABLE queues (
    name        text PRIMARY KEY,                       -- queue name
    paused      boolean     NOT NULL DEFAULT false,     -- paused queues are not claimed from
    max_running integer     CHECK (max_running IS NULL OR max_running >= 0), -- cluster-wide cap on running tasks; NULL = none
    created_at  timestamptz NOT NULL DEFAULT now(),     -- first use
    updated_at  timestamptz NOT NULL DEFAULT now()      -- last change of paused/max_running
);

-- runs: one execution of a workflow.
CREATE TABLE runs (
    id              bigserial PRIMARY KEY,              -- run id
    workflow        text        NOT NULL,               -- registered workflow name
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled', 'interrupted')), -- derived from its tasks (see README)
    paused          boolean     NOT NULL DEFAULT false, -- paused runs get no new claims
    input           jsonb       NOT NULL DEFAULT '{}',  -- the run's JSON input object
    idempotency_key text,                               -- optional; unique among live runs
    queue           text        NOT NULL,               -- default queue of its tasks
    priority        integer     NOT NULL DEFAULT 0,     -- default priority of its tasks (lower runs first)
    task_count      integer     NOT NULL,               -- number of tasks in the run
    created_at      timestamptz NOT NULL DEFAULT now(), -- enqueue time
    started_at      timestamptz,                        -- first claim of any of its tasks
    finished_at     timestamptz,                        -- when it reached completed/failed/cancelled
    updated_at      timestamptz NOT NULL DEFAULT now()  -- last status change
);
CREATE UNIQUE INDEX runs_idempotency_live ON runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'interrupted');
CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_status_created ON runs (status, created_at DESC, id DESC);
CREATE INDEX runs_workflow_created ON runs (workflow, created_at DESC, id DESC);
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- tasks: one node of one run; every state change is one row update.
CREATE TABLE tasks (
    id                   bigserial PRIMARY KEY,         -- task id
    run_id               bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE, -- owning run
    idx                  integer     NOT NULL,          -- position of the task in its workflow definition
    workflow             text        NOT NULL,          -- workflow name (copied from the run for cheap filters)
    name                 text        NOT NULL,          -- task name, unique within the workflow
    queue                text        NOT NULL,          -- queue it is claimed from
    priority             integer     NOT NULL DEFAULT 0, -- lower is claimed first
    status               text        NOT NULL
                         CHECK (status IN ('not_started', 'ready', 'running', 'deferred', 'completed', 'failed', 'skipped', 'interrupted', 'cancelled')), -- state machine, see README
    attempt              integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0), -- attempts started so far
    max_attempts         integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1), -- attempt budget
    available_at         timestamptz NOT NULL DEFAULT now(), -- not claimed before this time (backoff, run-at)
    deps                 integer[]   NOT NULL DEFAULT '{}', -- idx of the tasks it depends on
    dependents           integer[]   NOT NULL DEFAULT '{}', -- idx of the tasks that depend on it
    pending_deps         integer     NOT NULL DEFAULT 0, -- dependencies not yet terminal
    trigger_rule         jsonb,                          -- NULL = all_success; else {"mode":..,"conditions":[..]}
    requeue_on_interrupt boolean     NOT NULL DEFAULT false, -- interrupted -> ready (true) or parked interrupted (false)
    rescues              integer     NOT NULL DEFAULT 0, -- times rescued from a dead worker
    max_rescues          integer     NOT NULL DEFAULT 3, -- fail after this many rescues
    worker_id            bigint,                         -- worker holding it (running/deferred)
    lease_expires_at     timestamptz,                    -- rescuer interrupts it after this time
    output               jsonb,                          -- JSON output of the completed handler
    checkpoint           jsonb,                          -- state saved by Checkpoint, read by the next attempt
    last_error           text,                           -- error of the latest failed attempt
    created_at           timestamptz NOT NULL DEFAULT now(), -- enqueue time
    started_at           timestamptz,                    -- start of the current/latest attempt
    finished_at          timestamptz,                    -- when it became terminal
    updated_at           timestamptz NOT NULL DEFAULT now() -- last transition
);
CREATE UNIQUE INDEX tasks_run_idx ON tasks (run_id, idx);
-- Serves the claim query: ready rows of a queue in claim order.
CREATE INDEX tasks_claim ON tasks (queue, priority, available_at, id) WHERE status = 'ready';
-- Serves the rescuer and heartbeats: leases of held rows.
CREATE INDEX tasks_lease ON tasks (lease_expires_at) WHERE status IN ('running', 'deferred');
CREATE INDEX tasks_worker ON tasks (worker_id) WHERE status IN ('running', 'deferred');
-- Serves the site's lists.
CREATE INDEX tasks_status_updated ON tasks (status, updated_at DESC, id DESC);

-- task_events: append-only log of every transition.
CREATE TABLE task_events (
    id          bigserial PRIMARY KEY,                  -- event id, increasing in commit-ish order
    run_id      bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE, -- run of the task
    task_id     bigint      NOT NULL,                   -- task that moved (deleted with its run)
    from_status text,                                   -- NULL when the task was created
    to_status   text        NOT NULL,                   -- new state
    worker_id   bigint,                                 -- worker that made or held the transition
    attempt     integer     NOT NULL DEFAULT 0,         -- attempt number at the transition
    at          timestamptz NOT NULL DEFAULT now(),     -- transaction time of the transition
    error       text,                                   -- error of a failed attempt, reason of a rescue
    detail      jsonb                                   -- extra: stack, attempt log, cancel reason
);
CREATE INDEX task_events_task ON task_events (task_id, id);
CREATE INDEX task_events_run ON task_events (run_id, id);
CREATE INDEX task_events_at ON task_events (at);

-- schedules: cron expressions that enqueue runs.
CREATE TABLE schedules (
    id           bigserial PRIMARY KEY,                 -- schedule id (part of the fire idempotency key)
    name         text        NOT NULL UNIQUE,           -- unique name
    expression   text        NOT NULL,                  -- robfig/cron expression or descriptor
    timezone     text        NOT NULL DEFAULT 'UTC',    -- IANA zone the expression is read in
    workflow     text        NOT NULL,                  -- workflow to enqueue
    input        jsonb       NOT NULL DEFAULT '{}',     -- input of each run
    paused       boolean     NOT NULL DEFAULT false,    -- paused schedules do not fire
    catch_up     text        NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'one', 'all')), -- missed fires policy
    max_catch_up integer     NOT NULL DEFAULT 100 CHECK (max_catch_up >= 1), -- bound for catch_up = all
    next_fire_at timestamptz NOT NULL,                  -- next due fire
    last_fire_at timestamptz,                           -- latest fire time
    last_run_id  bigint,                                -- run of the latest fire
    created_at   timestamptz NOT NULL DEFAULT now(),    -- creation time
    updated_at   timestamptz NOT NULL DEFAULT now()     -- last change
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused;

-- leases: named leader leases (e.g. "scheduler").
CREATE TABLE leases (
    name        text PRIMARY KEY,                       -- lease name
    holder      text        NOT NULL,                   -- holder identity (worker name)
    expires_at  timestamptz NOT NULL,                   -- the lease is free after this
    acquired_at timestamptz NOT NULL DEFAULT now()      -- when the current holder got it
);

-- Monitoring views (documented in the README).
CREATE VIEW cairn_task_counts AS
    SELECT workflow, queue, status, count(*) AS tasks
    FROM tasks GROUP BY workflow, queue, status;

CREATE VIEW cairn_worker_slots AS
    SELECT w.id AS worker_id, w.name, w.status, w.slots,
           count(t.id) FILTER (WHERE t.status = 'running')  AS running,
           count(t.id) FILTER (WHERE t.status = 'deferred') AS deferred,
           w.heartbeat_at, now() - w.heartbeat_at AS heartbeat_age
    FROM workers w
    LEFT JOIN tasks t ON t.worker_id = w.id AND t.status IN ('running', 'deferred')
    GROUP BY w.id;

CREATE VIEW cairn_stuck_tasks AS
    SELECT id AS task_id, run_id, workflow, name, queue, status, worker_id, attempt,
           lease_expires_at, now() - lease_expires_at AS overdue
    FROM tasks
    WHERE status IN ('running', 'deferred') AND lease_expires_at < now();

CREATE VIEW cairn_queue_depth AS
    SELECT q.name AS queue, q.paused, q.max_running,
           count(t.id) FILTER (WHERE t.status = 'ready')                           AS ready,
           count(t.id) FILTER (WHERE t.status = 'ready' AND t.available_at <= now()) AS available,
           count(t.id) FILTER (WHERE t.status = 'running')                         AS running,
           count(t.id) FILTER (WHERE t.status = 'deferred')                        AS deferred,
           min(t.available_at) FILTER (WHERE t.status = 'ready')                   AS oldest_ready_at
    FROM queues q
    LEFT JOIN tasks t ON t.queue = q.name AND t.status IN ('ready', 'running', 'deferred')
    GROUP BY q.name;

CREATE VIEW cairn_task_attempts AS
    SELECT task_id, run_id, attempt, worker_id, to_status AS outcome, at AS ended_at, error, detail
    FROM task_events
    WHERE from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred');
