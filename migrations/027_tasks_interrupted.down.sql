DROP INDEX tasks_interrupted;
