-- A schedule declared in an engine's Config.Schedules records the
-- definition it was last given from there (expression, timezone,
-- workflow, input, catch_up, max_catch_up). A later Start applies the
-- config's definition only when it differs from that record, so edits
-- made on the site or through the API survive restarts until the code's
-- definition itself changes. NULL: never applied from a config (created on
-- the site or by CreateSchedule/UpsertSchedule); the first config that
-- declares the name then applies.
ALTER TABLE schedules ADD COLUMN config_definition jsonb;
