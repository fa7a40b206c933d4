package main

import (
	"strings"
	"testing"
)

func TestCeilingVariantsPicksByNameInTheirOwnOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		list string
		want []string
	}{
		{"cairn,bare", []string{"cairn", "bare"}},
		{"bare, cairn", []string{"cairn", "bare"}},
		{"bare", []string{"bare"}},
		{"cairn,cairn", []string{"cairn"}},
	} {
		got, err := ceilingVariants(c.list)
		if err != nil {
			t.Fatalf("%q: %v", c.list, err)
		}
		var names []string
		for _, v := range got {
			names = append(names, v.name)
		}
		if strings.Join(names, ",") != strings.Join(c.want, ",") {
			t.Errorf("%q: got %v, want %v", c.list, names, c.want)
		}
	}
	for _, bad := range []string{"", "river", "cairn,floor"} {
		if _, err := ceilingVariants(bad); err == nil || !strings.Contains(err.Error(), "-ceiling-variants") {
			t.Errorf("%q: got %v, want an error naming -ceiling-variants", bad, err)
		}
	}
}
