package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

// replaceFile leaves what writeFileAtomic leaves (content, permissions,
// no temp file), whether the file is new or replaced.
func TestReplaceFileAsWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"first\n", "second, longer\n"} {
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		if err := writeFileAtomic(a, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := replaceFile(b, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(b)
		if err != nil || string(got) != content {
			t.Fatalf("content %q, %v", got, err)
		}
		sa, err := os.Stat(a)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := os.Stat(b)
		if err != nil {
			t.Fatal(err)
		}
		if sa.Mode() != sb.Mode() {
			t.Errorf("mode %v, writeFileAtomic's %v", sb.Mode(), sa.Mode())
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Errorf("files left: %v", ents)
	}
}
