package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cairnhq/cairn/store"
)

func main() {
	ctx := context.Background()
	db, err := store.Open(ctx, os.Getenv("DATABASE_URL"), 10*time.Second)
	if err != nil {
		panic(err)
	}
	st, err := store.New(db, "cairn")
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		start := time.Now()
		var out []store.Claimed
		err := st.InTx(ctx, func(tx *store.Store) error {
			var err error
			out, err = tx.TaskClaim(ctx, store.ClaimParams{WorkerID: 1, Queues: []string{"default"}, Limits: []int{512}, Lease: time.Minute, Keyed: true})
			if err != nil {
				return err
			}
			return fmt.Errorf("rollback")
		})
		fmt.Println(len(out), err, time.Since(start))
	}
}
