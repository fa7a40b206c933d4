-- The calls of the functions of the engine's schema that the SQL API
-- shares with the Go engine (migration 035): each statement's text is
-- the function, in the migration that last created it. ?schema is the
-- store's schema, each ? an argument ($1, $2... in order).

-- name: RunInsert

SELECT ord, id, existing FROM ?schema.run_insert(?::jsonb, ?::jsonb, ?::boolean)

-- name: RunDebounce

SELECT id, existing FROM ?schema.run_debounce(?::jsonb, ?::jsonb, ?::text, ?::bigint, ?::bigint, ?::boolean, ?::boolean)

-- name: TaskTransition

SELECT id, run_id, queue, from_status, to_status, attempt, held_by, unblocked, promoted, settle, first, notified
FROM ?schema.task_transition(?::jsonb, ?::text[])

-- name: TaskCancelTree

SELECT id, run_id, queue, from_status, to_status, attempt, held_by, unblocked, promoted, settle, first, notified
FROM ?schema.cancel_tree(?::bigint[], ?::jsonb, ?::jsonb)

-- name: SignalSend

SELECT id, task_id, name, payload, sent_at FROM ?schema.signal_insert(?::bigint, ?::text, ?::jsonb)

