package maint

import (
	"testing"
	"time"
)

func TestRenewWithinLeavesMarginAtNextBeat(t *testing.T) {
	t.Parallel()
	cases := []struct{ lease, every, want time.Duration }{
		{30 * time.Second, 5 * time.Second, 20 * time.Second},
		{2 * time.Second, 200 * time.Millisecond, 1600 * time.Millisecond},
		{6 * time.Second, 5 * time.Second, 0}, // short lease: renew all
		{10 * time.Second, 3 * time.Second, 0},
	}
	for _, c := range cases {
		got := RenewWithin(c.lease, c.every)
		if got != c.want {
			t.Errorf("RenewWithin(%s, %s) = %s, want %s", c.lease, c.every, got, c.want)
		}
		if got != 0 && got-c.every < c.lease/2-c.every {
			t.Errorf("RenewWithin(%s, %s) = %s leaves too little margin", c.lease, c.every, got)
		}
	}
}
