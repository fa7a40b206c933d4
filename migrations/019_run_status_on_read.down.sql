-- Before 019 a claim wrote its run's row: store what the view reads in.
UPDATE runs r SET status = v.status, started_at = v.started_at, updated_at = v.updated_at
FROM cairn_runs v
WHERE v.id = r.id AND r.status = 'pending' AND v.status = 'running';
DROP VIEW cairn_runs;
