package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// ashEnv runs `sh -c env` of the busybox binary b with env and returns the
// names it printed.
func ashEnv(t *testing.T, b []byte, env []string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: bin, Args: []string{"sh", "-c", "env"}, Env: env}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c env: %v", err)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		names = append(names, strings.SplitN(l, "=", 2)[0])
	}
	return names
}

// The names of the ConfigMap and Secret env [Conformance] specs: Debian's
// sh drops all but A; upstream's keeps them all, and so must the patched one.
func TestKeepBadEnvNames(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the patch is amd64 code")
	}
	orig, err := os.ReadFile(busyboxPath)
	if err != nil {
		t.Skipf("no busybox (apt-get install -y busybox-static): %v", err)
	}
	env := []string{"p-data-1=value-1", "1_MY_VAR=2", "$_-data-1=3", "data-1=4", "A=5"}
	bad := []string{"p-data-1", "1_MY_VAR", "$_-data-1", "data-1"}

	before := ashEnv(t, orig, env)
	if !slices.Contains(before, "A") {
		t.Fatalf("Debian's sh dropped A: %v", before)
	}
	for _, n := range bad {
		if slices.Contains(before, n) {
			t.Logf("Debian's sh already keeps %q: the patch may no longer be needed", n)
		}
	}

	patched, err := KeepBadEnvNames(orig)
	if err != nil {
		t.Fatal(err)
	}
	if len(patched) != len(orig) {
		t.Fatalf("size changed: %d -> %d", len(orig), len(patched))
	}
	after := ashEnv(t, patched, env)
	for _, n := range append(bad, "A") {
		if !slices.Contains(after, n) {
			t.Errorf("patched sh -c env lacks %q: %v", n, after)
		}
	}

	// The shell is otherwise ash: identifier names are still variables.
	bin := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bin, patched, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: bin, Args: []string{"sh", "-c", `echo "$A:${data-unset}"; export -p | grep -c A=`}, Env: env}
	out, err := cmd.Output()
	if err != nil || string(out) != "5:unset\n1\n" {
		t.Errorf("patched sh: %q, %v; want \"5:unset\\n1\\n\"", out, err)
	}

	// Once patched the loop is gone: a second patch refuses, as does a
	// binary that is not the one the patch was written for.
	if _, err := KeepBadEnvNames(patched); err == nil {
		t.Error("patching twice: no error")
	}
	if _, err := KeepBadEnvNames([]byte("not an ELF file")); err == nil {
		t.Error("a non-ELF input: no error")
	}
}
