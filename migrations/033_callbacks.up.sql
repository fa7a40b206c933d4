-- Callback URLs (TaskHandle.CallbackURL): a signed, single-use URL that
-- delivers the JSON POSTed to it as a signal to a task. The URL carries
-- 32 random bytes; only their SHA-256 is stored, so a forged token is
-- simply not found and nothing here lets anyone rebuild a URL. Rows go
-- with their task's run when it is pruned or deleted (no foreign key, as
-- task_signals).
CREATE TABLE callbacks (
    token_hash bytea       PRIMARY KEY,            -- sha256 of the URL's token
    task_id    bigint      NOT NULL,               -- task the signal goes to (deleted with its run)
    attempt    integer     NOT NULL,               -- attempt that minted it
    name       text        NOT NULL,               -- signal name
    created_at timestamptz NOT NULL DEFAULT now(), -- when it was minted
    expires_at timestamptz NOT NULL,               -- refused from then on
    used_at    timestamptz,                        -- when it delivered its signal; NULL while unused
    used_by    text                                -- the caller's address that used it
);
CREATE INDEX callbacks_task ON callbacks (task_id);
