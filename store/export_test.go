package store

// SQL fragments of notify.go, for the tests that run them on PostgreSQL.
const (
	SQLEventsPayload = sqlEventsPayload
	SQLTakenPayload  = sqlTakenPayload
)
