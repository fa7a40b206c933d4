DROP TRIGGER run_rows_awaited ON run_rows;
DROP FUNCTION cairn_run_ended();
ALTER TABLE run_rows DROP COLUMN awaited;
