package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:s3cret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                             "postgres://u@h/db",
		"postgres://u:s3cret@h:port/db":                 "postgres://xxxxx@h:port/db",
		"postgres://h/db?password=s3cret&sslmode=off":   "postgres://h/db?password=xxxxx&sslmode=off",
		"host=h user=u password=s3cret dbname=d":        "host=h user=u password=xxxxx dbname=d",
		"host=h password='s3 cret' dbname=d":            "host=h password=xxxxx dbname=d",
	} {
		require.Equal(t, want, store.RedactDSN(in))
	}
}

// An empty URL is refused at once, by name; a server that is not there is
// named, its password masked.
func TestOpenNamesWhatItTried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := store.Open(ctx, " ", time.Second)
	require.ErrorIs(t, err, store.ErrEmptyDSN)
	require.ErrorContains(t, err, "DATABASE_URL")

	_, err = store.Open(ctx, "postgres://u:s3cret@127.0.0.1:1/db?sslmode=disable", 5*time.Second)
	require.Error(t, err)
	require.Contains(t, err.Error(), "postgres://u:xxxxx@127.0.0.1:1/db?sslmode=disable: ")
	require.NotContains(t, err.Error(), "s3cret")
	require.False(t, errors.Is(err, store.ErrEmptyDSN))
}
