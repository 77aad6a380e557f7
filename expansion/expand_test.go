package expansion

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"":                "",
		"$(A)":            "a",
		"x$(A)y$(B)z":     "xaybz",
		"$(MISSING)":      "$(MISSING)",
		"$$(A)":           "$(A)",
		"$$$(A)":          "$a",
		"$(A":             "$(A",
		"$A":              "$A",
		"a$":              "a$",
		"$(EMPTY)x":       "x",
		"$()":             "$()",
		"$(A)$(B)":        "ab",
		"echo $$HOME":     "echo $HOME",
		"$(A)$$(B)$$$$":   "a$(B)$$",
		"foo$(A$(B))bar)": "foo$(A$(B))bar)",
	} {
		if got := Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}
