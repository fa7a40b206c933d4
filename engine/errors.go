package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Errors returned by the engine's entry points. Callers match them with
// errors.Is; the wrapped message names what was wrong.
var (
	// ErrUnknownWorkflow: no workflow of that name is registered or stored.
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrInvalidWorkflow: a definition failed validation (cycle, unknown
	// dependency, duplicate or empty name, changed shape).
	ErrInvalidWorkflow = errors.New("invalid workflow")
	// ErrInvalidInput: run input is not a JSON object.
	ErrInvalidInput = errors.New("invalid input")
	// ErrInputTooLarge: run input exceeds Config.MaxInputBytes.
	ErrInputTooLarge = errors.New("input too large")
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrUnknownRun: a run given to WithAfter does not exist (the error
	// also matches ErrInvalidInput and names the ids).
	ErrUnknownRun = store.ErrUnknownRun
	// ErrNotFound: the run, task, queue or schedule does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidState: the task or run is not in a state the action applies to.
	ErrInvalidState = errors.New("invalid state")
	// ErrNotStarted: the call needs Start first.
	ErrNotStarted = errors.New("engine not started")
	// ErrTaskLost: the task was cancelled, rescued or otherwise taken from
	// this worker while its handler ran.
	ErrTaskLost = errors.New("task taken from this worker")
	// ErrShutdown: the engine is shutting down.
	ErrShutdown = errors.New("engine shutting down")
	// ErrWaitTimeout: TaskHandle.AwaitSignal's timeout passed with no
	// signal of its name.
	ErrWaitTimeout = errors.New("durable wait timed out")
)

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the task fails at once, without more attempts.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// retryAfterError asks for the next attempt after a given delay.
type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.after, e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so the next attempt (if any is left) starts after d
// instead of the policy's backoff.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{after: max(d, 0), err: err}
}
