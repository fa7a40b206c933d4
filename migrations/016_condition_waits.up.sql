-- Condition waits: the check interval of a task parked in DeferUntil.
--
-- A deferred task parked by DeferUntil(ctx, cond, every) stores every
-- here (and wait_since, when it parked; wait_kind stays NULL: it is not a
-- durable wait, and keeps the interrupt rule of RequeueOnInterrupt), so
-- that the site can say what the task waits for. Written by the park
-- itself and cleared by any move out of deferred, as the wait columns of
-- 011_durable_waits. No default, so the ALTER rewrites nothing; no index.
-- The time of the condition's last check is kept in the memory of the
-- engine that holds the task only (a write per check would cost
-- thousands of writes a second with many parked tasks).
ALTER TABLE tasks
    ADD COLUMN wait_every_ms bigint; -- interval of a DeferUntil condition's checks, in ms, while parked in it; else NULL
