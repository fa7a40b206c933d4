DROP VIEW IF EXISTS cairn_unroutable;
ALTER TABLE workers DROP COLUMN IF EXISTS handles;
