ALTER TABLE run_rows DROP COLUMN debounce_key, DROP COLUMN debounce_at, DROP COLUMN debounce_until; -- drops run_rows_debounce_key
