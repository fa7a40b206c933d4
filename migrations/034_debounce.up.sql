-- Debounce and singleton (engine.WithDebounce, WithSingleton): a run
-- enqueued with a debounce key is a normal run whose root tasks are ready
-- from debounce_at on. An enqueue of the key while the newest run holding
-- it has not started (no task ever claimed) replaces that run's input and,
-- for a debounce, moves debounce_at (and its ready tasks' available_at) to
-- least(now + wait, debounce_until). The enqueues of one key take turns on
-- a transaction-level advisory lock of the key (see store/debounce.go).
--
-- The columns are set by the enqueue's transaction, after the run's
-- insert; a run without the options leaves them NULL and costs no entry
-- of the partial index; they are not indexed otherwise, so a replace of
-- debounce_at stays a HOT update.
ALTER TABLE run_rows
    ADD COLUMN debounce_key text,          -- WithDebounce / WithSingleton key; NULL for other runs
    ADD COLUMN debounce_at timestamptz,    -- when the run's root tasks become claimable (debounce); NULL for a singleton
    ADD COLUMN debounce_until timestamptz; -- first enqueue + maxWait: debounce_at never moves past it; NULL for a singleton
-- The newest run of a key, the only one that can still take an enqueue.
CREATE INDEX run_rows_debounce_key ON run_rows (debounce_key, id) WHERE debounce_key IS NOT NULL;
