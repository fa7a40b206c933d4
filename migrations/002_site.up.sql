-- Indexes of the admin site.

-- Serves the runs list's key:value search (input @> '{"key": value}').
CREATE INDEX runs_input ON runs USING gin (input jsonb_path_ops);
