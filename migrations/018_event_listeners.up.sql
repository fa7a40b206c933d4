-- event_listeners: the processes that listen for committed transitions
-- on the events channel (engine.Subscribe and SubscribeLogs: the site's
-- live pages). Statements announce their transitions with NOTIFY only
-- while a row here has not expired. PostgreSQL serializes the commits of
-- notifying transactions, cluster-wide, from the start of the commit to
-- its end (a lock that keeps the notification queue in commit order), so
-- concurrent commits that notify cannot share a WAL flush: with nobody
-- listening, nobody should pay for that. A listener renews its row while
-- it listens (expires_at is on the database's clock) and deletes it when
-- it stops; a dead process's row expires.
CREATE TABLE event_listeners (
    holder     text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
