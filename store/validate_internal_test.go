package store

import (
	"errors"
	"testing"

	"github.com/lib/pq"
)

func TestInvalidValueMarksDatabaseRefusals(t *testing.T) {
	t.Parallel()
	err := invalidValue(&pq.Error{Code: "22003", Message: "integer out of range"})
	if !errors.Is(err, ErrInvalidValue) || !errors.Is(err, ErrDataException) {
		t.Fatalf("a class 22 error is %v; want ErrInvalidValue and ErrDataException", err)
	}
	other := &pq.Error{Code: "23505", Message: "duplicate key"}
	if err := invalidValue(other); errors.Is(err, ErrInvalidValue) || err != error(other) {
		t.Fatalf("a unique violation became %v; want it unchanged", err)
	}
	if err := checkArgs([]any{"a\x00b"}); !errors.Is(err, ErrInvalidValue) || errors.Is(err, ErrDataException) {
		t.Fatalf("the store's own check gave %v; want ErrInvalidValue without ErrDataException", err)
	}
}
