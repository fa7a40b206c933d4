package store

import "strconv"

// Templates of the statements of sql/ (see sqlgen_test.go).

// sqlEventsPayload builds, as an aggregate over rows with the columns id,
// run_id, from_status, to_status, queue, attempt and held_by, the
// payload of an EventsMessage.
const sqlEventsPayload = `json_build_object('e', json_agg(json_build_array(id, run_id, from_status, to_status, queue, attempt, held_by)))::text`

// sqlTakenPayload builds, as an aggregate over rows with the columns id
// and attempt, the payload of a ControlMessage of kind ControlTaken (the
// two aggregates read the rows in the same order).
const sqlTakenPayload = `json_build_object('k', '` + string(ControlTaken) + `', 't', json_agg(id), 'a', json_agg(attempt))::text`

// notifyCTEs announces the rows of the CTE src (columns id, run_id,
// from_status, to_status, queue, attempt, held_by) on the events channel
// (EventsPerPayload a payload), queues with new ready rows on the ready
// channel, and tasks taken from their holder on the control channel
// (TaskIDsPerPayload a payload). Arguments: events, ready, control channel
// names, then whether to announce taken tasks. notifyForce, selected by
// the statement, makes Postgres run the three. Events are announced only
// while a process listens for them (see sqlEventsListened).
func notifyCTEs(src string) string { return notifyCTEsWhen(src, "to_status = 'ready'") }

// notifyCTEsWaking is notifyCTEs that also announces on the ready channel
// the queues of src's rows for which the boolean expression frees holds
// (a keyed task left running: its key has room again).
func notifyCTEsWaking(src, frees string) string {
	return notifyCTEsWhen(src, "to_status = 'ready' OR "+frees)
}

// notifyCTEsWhen is notifyCTEs announcing on the ready channel the queues
// of src's rows for which the boolean expression wake holds ("false":
// none; the caller announces them after its commit, see ReadyNotify).
func notifyCTEsWhen(src, wake string) string {
	return `
, note AS (
	SELECT pg_notify(?, ` + sqlEventsPayload + `)
	FROM (SELECT *, (row_number() OVER () - 1) / ` + strconv.Itoa(EventsPerPayload) + ` AS grp FROM ` + src + `
	      WHERE ` + sqlEventsListened + `) x GROUP BY grp
), wake AS (
	SELECT pg_notify(?, ` + sqlReadyPayload("queue") + `) FROM (SELECT DISTINCT queue FROM ` + src + ` WHERE ` + wake + `) x
), ctl AS (
	SELECT pg_notify(?, ` + sqlTakenPayload + `)
	FROM (SELECT id, attempt, (row_number() OVER () - 1) / ` + strconv.Itoa(TaskIDsPerPayload) + ` AS grp FROM ` + src + `
	      WHERE ?::boolean AND from_status IN ('running', 'deferred') AND to_status NOT IN ('running', 'deferred')) x
	GROUP BY grp
)`
}

const notifyForce = `(SELECT count(*) FROM note) + (SELECT count(*) FROM wake) + (SELECT count(*) FROM ctl)`

// sqlEventsListened is true while a process listens for events.
const sqlEventsListened = `EXISTS (SELECT 1 FROM ?schema.event_listeners WHERE expires_at > now())`

// sqlReadyPayload returns the payload of a ReadyMessage for the queue
// name expression col.
func sqlReadyPayload(col string) string { return col }
