-- Returning keyed tasks ahead of new claims. A parked task with a
-- concurrency key gives its key's place back while it waits; when it may
-- run on and finds the key full, it stamps resume_wanted_at (the database
-- clock) at each try, at most 2 s apart. A keyed claim leaves room for
-- each task of the key stamped in the last 5 s, so new tasks of the key
-- no longer take the place a returning one waits for (they could starve
-- it before). A stamp that stops being renewed (the task was cancelled,
-- rescued, its worker died) stops counting after 5 s; a resume clears it.
ALTER TABLE tasks ADD COLUMN resume_wanted_at timestamptz;
CREATE INDEX tasks_resume_wanted ON tasks (conc_key, resume_wanted_at) WHERE status = 'deferred' AND resume_wanted_at IS NOT NULL;
