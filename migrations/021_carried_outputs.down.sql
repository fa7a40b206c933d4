ALTER TABLE tasks DROP COLUMN carried_outputs;
ALTER TABLE tasks DROP COLUMN carried_n;
