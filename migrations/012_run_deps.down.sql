DROP FUNCTION IF EXISTS finish_claim_refused(bigint[]);
ALTER TABLE runs DROP COLUMN IF EXISTS has_waiters;
DROP TABLE IF EXISTS run_deps;
