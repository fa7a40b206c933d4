package store

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/lib/pq"
)

// IsUnavailable reports whether err says the database could not be reached
// or dropped the connection (refused or reset connections, a server
// shutting down, crashed or still starting up, too many connections),
// rather than that a statement itself failed. Loops use it to tell an
// outage, which they wait out, from a bug worth a log line of its own.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		code := string(pqErr.Code)
		switch {
		case strings.HasPrefix(code, "08"): // connection_exception
			return true
		case code == "57P01", code == "57P02", code == "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		case code == "53300": // too_many_connections
			return true
		}
		return false
	}
	for _, target := range []error{driver.ErrBadConn, sql.ErrConnDone, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// IsRefused reports whether err says PostgreSQL refused the statement for
// what it wrote (a value it cannot take, a constraint, an exception
// raised by a trigger) rather than for the database's state: the same
// write would fail again, so a loop that retries writes must set it
// apart instead. Outages (IsUnavailable), transaction conflicts
// (class 40), lock and resource limits (classes 53, 55), cancels and
// shutdowns (class 57) and internal errors (classes 58, XX) are not.
func IsRefused(err error) bool {
	if err == nil || IsUnavailable(err) {
		return false
	}
	if errors.Is(err, ErrInvalidValue) {
		return true
	}
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || len(pqErr.Code) < 2 {
		return false
	}
	switch string(pqErr.Code)[:2] {
	case "22", "23", "P0", "54", "2F", "39", "38": // data, integrity, raised, program limit, routine exceptions
		return true
	}
	return false
}
