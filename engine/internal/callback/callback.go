// Package callback mints and uses callback URLs: signed, single-use URLs
// that deliver the JSON POSTed to them as a signal to a task
// (TaskHandle.CallbackURL, Engine.UseCallback; the web site serves POST
// /callbacks/{token}). The URL carries 32 random bytes (base64url); the
// database keeps only their SHA-256 (store's callbacks), so a forged or
// mistyped token is simply not found, and no secret is shared between
// the engine and the web servers.
package callback

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/store"
)

// Store is what the package runs on the database.
type Store interface {
	CallbackInsert(ctx context.Context, h store.StepHolder, tokenHash []byte, name string, ttl time.Duration) (time.Time, error)
	CallbackUse(ctx context.Context, tokenHash []byte, addr string, payload json.RawMessage) (*store.Callback, error)
}

// Errors are the engine's error values the package wraps: the journal's
// (InvalidInput for a bad name, ttl, base URL or payload; TaskLost when
// the attempt no longer holds the task; NotFound for an unknown or expired
// token) and two more.
type Errors struct {
	journal.Errors
	TooLarge     error // a payload over the limit
	InvalidState error // a used token, a task that moved on
}

// Path is the path of a callback URL before its token.
const Path = "/callbacks/"

// tokenBytes is how many random bytes a token carries.
const tokenBytes = 32

// Mint stores a callback for the signal name of the holder's task, valid
// for ttl, and returns its URL: base (Config.CallbackBaseURL) + Path +
// token. Each call mints a new one. The attempt must still hold the task
// (errs.TaskLost otherwise).
func Mint(ctx context.Context, st Store, h store.StepHolder, base, name string, ttl time.Duration, errs journal.Errors) (string, error) {
	base = strings.TrimRight(base, "/")
	switch {
	case base == "":
		return "", fmt.Errorf("%w: callback URL: Config.CallbackBaseURL is not set", errs.InvalidInput)
	case ttl <= 0:
		return "", fmt.Errorf("%w: callback URL: ttl must be positive, got %s", errs.InvalidInput, ttl)
	}
	if err := errs.CheckLabel("signal name", name); err != nil {
		return "", err
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("callback URL: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	if _, err := st.CallbackInsert(ctx, h, Hash(token), name, ttl); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("%w: %w", errs.TaskLost, err)
		}
		return "", err
	}
	return base + Path + token, nil
}

// Hash is what the database keeps of a token.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Use delivers payload (JSON of at most maxBytes) as the signal of the
// callback of token, marking it used by addr, in one transaction; signal
// then wakes the task in this process (a NOTIFY wakes it elsewhere). It
// returns the task's id. Refused, with nothing written: errs.NotFound for
// a token that is unknown (forged, mistyped, pruned) or expired,
// errs.InvalidState for one used already or whose task moved on (finished,
// or signalled with the name since the URL was minted).
func Use(ctx context.Context, st Store, token string, payload json.RawMessage, maxBytes int, addr string,
	signal func(taskID int64), errs Errors) (int64, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if err := store.CheckJSON(payload); err != nil {
		return 0, fmt.Errorf("%w: callback payload %w", errs.InvalidInput, err)
	}
	if len(payload) > maxBytes {
		return 0, fmt.Errorf("%w: callback payload: %d bytes, limit %d", errs.TooLarge, len(payload), maxBytes)
	}
	if len(token) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return 0, fmt.Errorf("%w: no such callback", errs.NotFound)
	}
	cb, err := st.CallbackUse(ctx, Hash(token), addr, payload)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, fmt.Errorf("%w: no such callback", errs.NotFound)
	case errors.Is(err, store.ErrCallbackExpired):
		return 0, fmt.Errorf("%w: %w", errs.NotFound, err)
	case errors.Is(err, store.ErrCallbackUsed), errors.Is(err, store.ErrCallbackMovedOn), errors.Is(err, store.ErrTaskFinished):
		return 0, fmt.Errorf("%w: %w", errs.InvalidState, err)
	case err != nil:
		return 0, err
	}
	signal(cb.TaskID)
	return cb.TaskID, nil
}
