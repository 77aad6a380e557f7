package stargz

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The layer caches a previous process left are found and removed; those
// made after the listing (this process's remounts) are kept.
func TestStaleCaches(t *testing.T) {
	root := t.TempDir()
	if got := staleCaches(root); len(got) != 0 {
		t.Errorf("fresh root: %q", got)
	}
	old := []string{filepath.Join(root, "stargz", "fscache", "111"), filepath.Join(root, "stargz", "httpcache", "222")}
	for _, d := range old {
		if err := os.MkdirAll(filepath.Join(d, "ab"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "ab", "abcd"), []byte("chunk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stale := staleCaches(root)
	if !slices.Equal(stale, old) {
		t.Errorf("stale %q, want %q", stale, old)
	}
	fresh := filepath.Join(root, "stargz", "fscache", "333")
	if err := os.Mkdir(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	removeStaleCaches(stale)
	for _, d := range old {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want removed", d, err)
		}
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("this run's cache: %v", err)
	}
}
