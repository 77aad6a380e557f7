// Package expansion is the kubelet's $(VAR) syntax, for commands, args,
// env values and subPathExpr (the pod spec) and exec probes and hooks.
package expansion

import "strings"

// Expand replaces $(VAR) references as the kubelet does: a defined variable
// is substituted, an undefined one is left as written, "$$" escapes a "$",
// and any other "$" is literal.
func Expand(input string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(input); i++ {
		if input[i] != '$' || i+1 >= len(input) {
			continue
		}
		b.WriteString(input[last:i])
		text, isVar, advance := readVariable(input[i+1:])
		if isVar {
			if v, ok := lookup(text); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + text + ")")
			}
		} else {
			b.WriteString(text)
		}
		i += advance
		last = i + 1
	}
	b.WriteString(input[last:])
	return b.String()
}

// readVariable reads what follows a "$": the text to emit (or the variable
// name), whether it is a variable, and how many bytes were consumed.
func readVariable(s string) (string, bool, int) {
	switch s[0] {
	case '$':
		return "$", false, 1
	case '(':
		if end := strings.IndexByte(s[1:], ')'); end >= 0 {
			return s[1 : end+1], true, end + 2
		}
		return "$(", false, 1
	default:
		return "$" + s[:1], false, 1
	}
}

// EnvLookup looks names up in a "KEY=VALUE" list (a container's resolved
// environment).
func EnvLookup(env []string) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
