package probes

import (
	v1 "k8s.io/api/core/v1"

	"github.com/hostlet/hostlet/expansion"
)

// expandStatic expands $(VAR) in an exec command with the container's
// literal env values only, as the kubelet does for exec probes and hooks.
func expandStatic(cmd []string, c *v1.Container) []string {
	if c == nil {
		return cmd
	}
	vals := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vals[e.Name] = e.Value
		}
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expansion.Expand(s, lookup)
	}
	return out
}
