package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// volumeFile is one file of a configMap/secret/projected/downwardAPI volume.
type volumeFile struct {
	Data []byte
	Mode os.FileMode
}

// writeAtomic publishes files into dir the way the kubelet's AtomicWriter
// does: the payload goes into a new timestamped dir, "..data" is switched to
// it with one rename, and the visible names are symlinks through "..data".
// Readers see the old or the new set, never a mix.
func writeAtomic(dir string, files map[string]volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for name, f := range files {
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) || strings.Contains(name, "/../") {
			return fmt.Errorf("invalid file name %q", name)
		}
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			return err
		}
		// WriteFile is subject to umask; the mode must be exact.
		if err := os.Chmod(p, f.Mode); err != nil {
			return err
		}
	}
	dataLink := filepath.Join(dir, "..data")
	old, _ := os.Readlink(dataLink)
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return err
	}
	// Visible top-level names point through ..data; stale ones go.
	want := map[string]bool{}
	for name := range files {
		top := strings.SplitN(name, "/", 2)[0]
		want[top] = true
		link := filepath.Join(dir, top)
		target := filepath.Join("..data", top)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, "..") && !want[n] {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
