package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// MountsBelow are the mount points at or below the root dir, from the
// mount table: what a removal must not reach through.
func (l Layout) MountsBelow() ([]string, error) {
	root, err := filepath.EvalSymlinks(l.root)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(root))
	if err != nil {
		return nil, fmt.Errorf("the mounts below %s: %w", root, err)
	}
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return below(root, out), nil
}

// below are the mount points at or below root (PrefixFilter also passes
// /var/lib/kubelet2 for /var/lib/kubelet), sorted, each once.
func below(root string, mountpoints []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range mountpoints {
		if (m == root || strings.HasPrefix(m, root+"/")) && !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// RemoveRoot removes the root dir and all in it, as kubeadm reset deletes
// the kubelet's directory, once nothing is mounted below it: a removal
// never reaches through a mount (a volume a driver did not unpublish is
// someone's data). The mounts found are an error naming them, and nothing
// is removed. hostlet's bind of the root dir onto itself (MakeShared) is
// unmounted first, which shows the same directory; a root dir that is a
// mount point of something else (a disk of its own) is emptied and kept.
func (l Layout) RemoveRoot() (kept bool, err error) {
	root, err := filepath.EvalSymlinks(l.root)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for {
		all, err := mountinfo.GetMounts(nil)
		if err != nil {
			return false, fmt.Errorf("the mount table: %w", err)
		}
		var points []string
		for _, m := range all {
			points = append(points, m.Mountpoint)
		}
		rootMounted, live := splitRoot(root, below(root, points))
		if len(live) > 0 {
			return false, fmt.Errorf("still mounted below %s, not removed: %s", root, strings.Join(live, ", "))
		}
		if !rootMounted {
			return false, os.RemoveAll(root)
		}
		if !selfBind(root, all) {
			break
		}
		// Detached: a socket a driver still listens on below the root dir
		// holds the bind busy. Nothing is mounted below it and the same
		// directory is under it, so nothing is hidden or lost.
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			return false, fmt.Errorf("unmounting the bind of %s onto itself: %w", root, err)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return true, err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return true, err
		}
	}
	return true, nil
}

// splitRoot tells the root dir's own mount from those below it.
func splitRoot(root string, mounts []string) (rootMounted bool, live []string) {
	for _, m := range mounts {
		if m == root {
			rootMounted = true
		} else {
			live = append(live, m)
		}
	}
	return rootMounted, live
}

// selfBind says whether the top mount at root is a bind of root onto
// itself: the same directory of the filesystem its parent mount shows
// there, so that unmounting it shows the very same files.
func selfBind(root string, mounts []*mountinfo.Info) bool {
	var top *mountinfo.Info
	byID := map[int]*mountinfo.Info{}
	for _, m := range mounts {
		byID[m.ID] = m
		// The table lists a mount after the one it is stacked on.
		if m.Mountpoint == root {
			top = m
		}
	}
	if top == nil {
		return false
	}
	parent := byID[top.Parent]
	if parent == nil || parent.Major != top.Major || parent.Minor != top.Minor {
		return false
	}
	rel, err := filepath.Rel(parent.Mountpoint, root)
	if err != nil || strings.HasPrefix(rel, "..") {
		return false
	}
	return filepath.Join(parent.Root, rel) == top.Root
}
