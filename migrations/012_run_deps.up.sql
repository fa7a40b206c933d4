-- Run dependencies (engine.WithAfter): a run whose root tasks wait until
-- other runs finish.
--
-- run_deps holds one row per (waiting run, run it waits for). status is
-- the awaited run's final status (completed, failed or cancelled), written
-- when it first finishes, or at the enqueue when it had already finished;
-- NULL while it has not. The waiting run's roots are inserted not_started
-- with pending_deps counting the rows still NULL, and count down as they
-- are written, in the transaction that finishes the awaited run. No
-- foreign key on after_run_id: an awaited run that finished may be
-- pruned, its outcome stays here.
CREATE TABLE run_deps (
    run_id bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    after_run_id bigint NOT NULL,
    status text,
    PRIMARY KEY (run_id, after_run_id)
);
-- Who waits on a run that just finished: only the edges still open.
CREATE INDEX run_deps_waiting ON run_deps (after_run_id) WHERE status IS NULL;

-- has_waiters: a run that has not finished and that some run waits for.
-- Set by the enqueue of the waiting run (under the awaited run's row lock),
-- cleared when it finishes and its waiters are counted down; a run that
-- finishes without waiters costs no lookup of run_deps.
ALTER TABLE runs ADD COLUMN has_waiters boolean NOT NULL DEFAULT false;

-- finish_claim_refused stops the one-statement finish-and-claim when it
-- would finish a run that others wait for: their roots are counted down
-- and released by the transaction path instead (see store/finishclaim.go).
CREATE FUNCTION finish_claim_refused(runs bigint[]) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(runs) > 0 THEN
        RAISE EXCEPTION 'runs % finished with waiters', runs USING ERRCODE = 'CRW01';
    END IF;
    RETURN 0;
END $$;
