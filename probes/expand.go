package probes

import (
	"strings"

	v1 "k8s.io/api/core/v1"
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
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expand(s, vals)
	}
	return out
}

func expand(s string, vals map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += end + 2
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
