package store

// SQL fragments of notify.go, for the tests that run them on PostgreSQL.
const (
	SQLEventsPayload = sqlEventsPayload
	SQLTakenPayload  = sqlTakenPayload
)

// ClaimQuery is the claim statement (TaskClaim's) for a claim of up to
// limit tasks, for the tests that explain it.
func (s *Store) ClaimQuery(limit int) string { return s.claimQuery(limitBucket(limit)) }

// KeyedClaimQuery is the keyed claim statement, for the tests that
// explain it.
func (s *Store) KeyedClaimQuery() string { return s.keyedClaimQuery() }

// VacuumLockKey is the advisory lock VacuumHot takes, for the test that
// holds it.
func (s *Store) VacuumLockKey() int64 { return s.lockKey("vacuum") }

// Query is the prepared statement named name (sql/*.sql) as the store
// sends it, for the tests that explain it.
func (s *Store) Query(name string) string { return s.query(name) }
