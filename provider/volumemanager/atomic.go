package volumemanager

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// File is one file of a content volume (configMap, secret, projected,
// downwardAPI).
type File struct {
	Data []byte
	Mode os.FileMode
}

const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
	linkTmp     = "..link_tmp"
)

// tsDirName matches the payload directories the writer makes.
var tsDirName = regexp.MustCompile(`^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+$`)

// writeAtomic publishes files into dir the way the kubelet's AtomicWriter
// does: the payload goes into a new timestamped dir, "..data" is switched to
// it with one rename, and the visible names are symlinks through "..data".
// Readers see the old or the new set, never a mix.
//
// Unlike the kubelet's it trusts nothing it finds in dir: whoever could
// write there may have planted links, so every operation goes through an
// os.Root (nothing resolves outside dir), "..data" is used only when it is a
// link to a payload directory directly in dir (else it is replaced, never
// followed), and only links the writer itself makes are removed. An
// unchanged payload is left alone, so inotify watchers do not fire on every
// resync. setPerms (may be nil) is applied to a new payload directory
// before it is published. It reports whether anything was written.
func writeAtomic(dir string, files map[string]File, setPerms func(tsDir string) error) (bool, error) {
	payload := make(map[string]File, len(files))
	for name, f := range files {
		if err := validatePayloadPath(name); err != nil {
			return false, err
		}
		payload[path.Clean(name)] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false, err
	}
	defer root.Close()

	old := currentPayloadDir(root)
	if old != "" {
		same, err := samePayload(root, old, payload)
		if err != nil {
			return false, err
		}
		if same {
			changed, err := publishLinks(root, payload)
			return changed, err
		}
	}

	ts, err := newPayloadDir(root)
	if err != nil {
		return false, err
	}
	if err := writePayload(root, ts, payload); err != nil {
		_ = root.RemoveAll(ts)
		return false, err
	}
	if setPerms != nil {
		if err := setPerms(path.Join(dir, ts)); err != nil {
			_ = root.RemoveAll(ts)
			return false, err
		}
	}
	_ = root.RemoveAll(dataLinkTmp)
	if err := root.Symlink(ts, dataLinkTmp); err != nil {
		_ = root.RemoveAll(ts)
		return false, err
	}
	if err := root.Rename(dataLinkTmp, dataLink); err != nil {
		_ = root.Remove(dataLinkTmp)
		_ = root.RemoveAll(ts)
		return false, err
	}
	if _, err := publishLinks(root, payload); err != nil {
		return true, err
	}
	// The previous payload and any left by a crash go; a name that matches
	// but is a link is removed as a link.
	entries, err := readDir(root, ".")
	if err != nil {
		return true, err
	}
	for _, e := range entries {
		if n := e.Name(); tsDirName.MatchString(n) && n != ts {
			if err := root.RemoveAll(n); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// validatePayloadPath is the kubelet's check of a payload file name.
func validatePayloadPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	case path.IsAbs(p):
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	case len(p) > 4096:
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", 4096)
	}
	items := strings.Split(p, "/")
	for _, it := range items {
		if it == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(it) > 255 {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", 255)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

// currentPayloadDir is the payload directory "..data" points to, or "" when
// there is none. A "..data" that is not a link to a payload directory
// directly in the volume was not made by the writer: it is removed (as the
// entry it is, never what it points to) and the volume written afresh.
func currentPayloadDir(root *os.Root) string {
	fi, err := root.Lstat(dataLink)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	target := ""
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, _ = root.Readlink(dataLink)
		if tsDirName.MatchString(target) {
			if ti, err := root.Lstat(target); err == nil && ti.IsDir() {
				return target
			}
		}
	}
	log.WithFields(log.Fields{"dir": root.Name(), "target": target}).Warn("volume's ..data is not the writer's: replacing it")
	if err := root.RemoveAll(dataLink); err != nil {
		log.WithError(err).WithField("dir", root.Name()).Warn("removing a foreign ..data")
	}
	return ""
}

// samePayload: the payload directory ts holds exactly the payload's files
// (regular files, same bytes) and directories.
func samePayload(root *os.Root, ts string, payload map[string]File) (bool, error) {
	want := map[string]bool{}
	for name := range payload {
		for p := name; p != "." && p != "/"; p = path.Dir(p) {
			want[p] = true
		}
	}
	n := 0
	same := true
	err := fs.WalkDir(root.FS(), ts, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == ts {
			return nil
		}
		rel := strings.TrimPrefix(p, ts+"/")
		f, isFile := payload[rel]
		switch {
		case !want[rel]:
			same = false
		case isFile:
			if !d.Type().IsRegular() {
				same = false
				break
			}
			fh, err := root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(fh, int64(len(f.Data))+1))
			fh.Close()
			if err != nil {
				return err
			}
			same = bytes.Equal(b, f.Data)
		case !d.IsDir():
			same = false
		}
		n++
		if !same {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return same && n == len(want), nil
}

// newPayloadDir makes a new empty payload directory named by the time.
func newPayloadDir(root *os.Root) (string, error) {
	prefix := time.Now().UTC().Format("..2006_01_02_15_04_05.")
	for range 100 {
		name := prefix + strconv.FormatUint(uint64(rand.Uint32()), 10)
		err := root.Mkdir(name, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		// Mkdir obeys the umask.
		return name, root.Chmod(name, 0o755)
	}
	return "", fmt.Errorf("no free payload directory name in %s", root.Name())
}

// writePayload writes the files into the new payload directory ts.
func writePayload(root *os.Root, ts string, payload map[string]File) error {
	for name, f := range payload {
		p := path.Join(ts, name)
		if d := path.Dir(p); d != ts {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		fh, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, f.Mode)
		if err != nil {
			return err
		}
		_, err = fh.Write(f.Data)
		if err == nil {
			// The umask applied at creation; the mode must be exact.
			err = fh.Chmod(f.Mode)
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// publishLinks makes each top-level payload name a link through "..data"
// and removes the writer's links to names no longer in the payload. Only
// symlinks are ever replaced or removed: anything else in the way is an
// error. It reports whether it changed anything.
func publishLinks(root *os.Root, payload map[string]File) (bool, error) {
	changed := false
	want := map[string]bool{}
	for name := range payload {
		top, _, _ := strings.Cut(name, "/")
		if want[top] {
			continue
		}
		want[top] = true
		target := path.Join(dataLink, top)
		fi, err := root.Lstat(top)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Symlink(target, top); err != nil {
				return changed, err
			}
			changed = true
			continue
		case err != nil:
			return changed, err
		case fi.Mode()&fs.ModeSymlink == 0:
			return changed, fmt.Errorf("%s in %s is not a link of the volume's", top, root.Name())
		}
		if cur, err := root.Readlink(top); err == nil && cur == target {
			continue
		}
		// A stray link is swapped in one rename, so the name never vanishes.
		_ = root.Remove(linkTmp)
		if err := root.Symlink(target, linkTmp); err != nil {
			return changed, err
		}
		if err := root.Rename(linkTmp, top); err != nil {
			return changed, err
		}
		changed = true
	}
	entries, err := readDir(root, ".")
	if err != nil {
		return changed, err
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "..") || want[n] || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if cur, err := root.Readlink(n); err == nil && cur == path.Join(dataLink, n) {
			if err := root.Remove(n); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	return changed, nil
}

func readDir(root *os.Root, name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(root.FS(), name)
}
