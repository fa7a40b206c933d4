ALTER TABLE schedules DROP COLUMN config_definition;
