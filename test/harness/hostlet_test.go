package harness

import "testing"

// A test's own --eviction-hard, in either spelling, replaces the harness's.
func TestHasFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--eviction-hard", "memory.available<1Gi"}, true},
		{[]string{"--v", "2", "--eviction-hard=nodefs.available<20%"}, true},
		{[]string{"--eviction-hard-x", "y", "--eviction-soft", "memory.available<1Gi"}, false},
	} {
		if got := hasFlag(c.args, "--eviction-hard"); got != c.want {
			t.Errorf("hasFlag(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
