package volumemanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// atomicFixture is a volume dir three levels below a temp dir, with a bait
// file beside it that a hostile ..data may point at.
func atomicFixture(t *testing.T) (dir, bait string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "pods", "uid", "volumes", "vol")
	bait = filepath.Join(base, "bait")
	if err := os.MkdirAll(bait, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bait, "f"), []byte("bait"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, bait
}

func checkBait(t *testing.T, bait string) {
	t.Helper()
	entries, err := os.ReadDir(bait)
	if err != nil || len(entries) != 1 {
		t.Fatalf("bait dir changed: %v %v", entries, err)
	}
	if b, err := os.ReadFile(filepath.Join(bait, "f")); err != nil || string(b) != "bait" {
		t.Fatalf("bait file changed: %q %v", b, err)
	}
}

func write(t *testing.T, dir string, kv map[string]string) bool {
	t.Helper()
	files := map[string]File{}
	for k, v := range kv {
		files[k] = File{Data: []byte(v), Mode: 0o644}
	}
	changed, err := writeAtomic(dir, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// checkVolume: the volume shows exactly kv through its links, with one
// payload dir that ..data points to.
func checkVolume(t *testing.T, dir string, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if b, err := os.ReadFile(filepath.Join(dir, k)); err != nil || string(b) != v {
			t.Errorf("%s = %q %v, want %q", k, b, err, v)
		}
		top, _, _ := strings.Cut(k, "/")
		if l, err := os.Readlink(filepath.Join(dir, top)); err != nil || l != "..data/"+top {
			t.Errorf("link %s -> %q %v", top, l, err)
		}
	}
	ts, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || !tsDirName.MatchString(ts) {
		t.Errorf("..data -> %q %v", ts, err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if tsDirName.MatchString(e.Name()) && e.Name() != ts {
			t.Errorf("stale payload dir %s", e.Name())
		}
		names = append(names, e.Name())
	}
	if want := len(topNames(kv)) + 2; len(entries) != want {
		t.Errorf("entries %v, want %d", names, want)
	}
}

func topNames(kv map[string]string) map[string]bool {
	m := map[string]bool{}
	for k := range kv {
		top, _, _ := strings.Cut(k, "/")
		m[top] = true
	}
	return m
}

func TestAtomicLayoutAndUpdate(t *testing.T) {
	dir, _ := atomicFixture(t)
	v1 := map[string]string{"a": "one", "sub/dir/b.txt": "two", "gone": "x"}
	if !write(t, dir, v1) {
		t.Fatal("first write reported no change")
	}
	checkVolume(t, dir, v1)
	if fi, err := os.Stat(filepath.Join(dir, "sub/dir/b.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v %v", fi, err)
	}
	v2 := map[string]string{"a": "uno", "sub/dir/b.txt": "two", "sub/c": "three"}
	if !write(t, dir, v2) {
		t.Fatal("update reported no change")
	}
	checkVolume(t, dir, v2)
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !os.IsNotExist(err) {
		t.Errorf("stale link kept: %v", err)
	}
}

// An unchanged payload writes nothing: no new dir, no touched link, so an
// inotify watcher sees nothing.
func TestAtomicUnchangedPayloadWritesNothing(t *testing.T) {
	dir, _ := atomicFixture(t)
	kv := map[string]string{"a": "one", "sub/b": "two"}
	write(t, dir, kv)
	ts1, _ := os.Readlink(filepath.Join(dir, "..data"))
	before, _ := os.Lstat(dir)
	for range 3 {
		if write(t, dir, kv) {
			t.Fatal("unchanged payload rewritten")
		}
	}
	ts2, _ := os.Readlink(filepath.Join(dir, "..data"))
	after, _ := os.Lstat(dir)
	if ts1 != ts2 || !before.ModTime().Equal(after.ModTime()) {
		t.Errorf("volume dir touched: %s -> %s, mtime %v -> %v", ts1, ts2, before.ModTime(), after.ModTime())
	}
	// An extra file in the payload dir, or one missing, is a change.
	os.WriteFile(filepath.Join(dir, ts1, "extra"), nil, 0o644)
	if !write(t, dir, kv) {
		t.Error("payload dir with an extra file not rewritten")
	}
	checkVolume(t, dir, kv)
}

// A ..data that someone else pointed elsewhere is never followed: the bait
// it points at stays, and the volume is written afresh.
func TestAtomicHostileData(t *testing.T) {
	for name, plant := range map[string]func(dir, bait string){
		"relative out": func(dir, bait string) { os.Symlink("../../../../bait", filepath.Join(dir, "..data")) },
		"absolute":     func(dir, bait string) { os.Symlink(bait, filepath.Join(dir, "..data")) },
		"ts name that is a link": func(dir, bait string) {
			os.Symlink(bait, filepath.Join(dir, "..2020_01_01_00_00_00.1"))
			os.Symlink("..2020_01_01_00_00_00.1", filepath.Join(dir, "..data"))
		},
		"a directory": func(dir, bait string) { os.Mkdir(filepath.Join(dir, "..data"), 0o755) },
		"payload file a link": func(dir, bait string) {
			ts, _ := os.Readlink(filepath.Join(dir, "..data.orig"))
			os.Remove(filepath.Join(dir, ts, "a"))
			os.Symlink(filepath.Join(bait, "f"), filepath.Join(dir, ts, "a"))
			os.Rename(filepath.Join(dir, "..data.orig"), filepath.Join(dir, "..data"))
		},
		"visible link to bait": func(dir, bait string) {
			os.Rename(filepath.Join(dir, "..data.orig"), filepath.Join(dir, "..data"))
			os.Remove(filepath.Join(dir, "a"))
			os.Symlink(bait, filepath.Join(dir, "a"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, bait := atomicFixture(t)
			kv := map[string]string{"a": "one", "sub/b": "two"}
			write(t, dir, kv)
			os.Rename(filepath.Join(dir, "..data"), filepath.Join(dir, "..data.orig"))
			plant(dir, bait)
			os.RemoveAll(filepath.Join(dir, "..data.orig"))
			// Unchanged payload and an update: both leave the bait.
			write(t, dir, kv)
			checkBait(t, bait)
			checkVolume(t, dir, kv)
			kv["a"] = "uno"
			write(t, dir, kv)
			checkBait(t, bait)
			checkVolume(t, dir, kv)
		})
	}
}

// Names the writer does not own are left alone, even when stale.
func TestAtomicLeavesForeignEntries(t *testing.T) {
	dir, bait := atomicFixture(t)
	write(t, dir, map[string]string{"a": "one"})
	os.Symlink(bait, filepath.Join(dir, "foreign"))
	os.WriteFile(filepath.Join(dir, "plain"), []byte("p"), 0o644)
	write(t, dir, map[string]string{"a": "two"})
	if _, err := os.Lstat(filepath.Join(dir, "foreign")); err != nil {
		t.Error("foreign link removed")
	}
	if _, err := os.Lstat(filepath.Join(dir, "plain")); err != nil {
		t.Error("foreign file removed")
	}
	checkBait(t, bait)
	// A payload name taken by something that is not a link is an error.
	if _, err := writeAtomic(dir, map[string]File{"plain": {Data: []byte("x"), Mode: 0o644}}, nil); err == nil {
		t.Error("replaced a file the writer did not make")
	}
}

func TestAtomicRefusesBadNames(t *testing.T) {
	dir, bait := atomicFixture(t)
	for _, n := range []string{"../x", "/abs", "..foo", "a/../../x", ""} {
		if _, err := writeAtomic(dir, map[string]File{n: {Data: []byte("x"), Mode: 0o644}}, nil); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
	checkBait(t, bait)
}
