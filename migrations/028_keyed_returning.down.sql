DROP INDEX tasks_resume_wanted;
ALTER TABLE tasks DROP COLUMN resume_wanted_at;
