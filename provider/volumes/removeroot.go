package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
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
// is removed. A root dir that is a mount point of its own (a disk of its
// own, or hostlet's shared bind of it) is emptied and kept.
func (l Layout) RemoveRoot() (kept bool, err error) {
	root, err := filepath.EvalSymlinks(l.root)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	mounts, err := Layout{root: root}.MountsBelow()
	if err != nil {
		return false, err
	}
	rootMounted, live := splitRoot(root, mounts)
	if len(live) > 0 {
		return false, fmt.Errorf("still mounted below %s, not removed: %s", root, strings.Join(live, ", "))
	}
	if !rootMounted {
		return false, os.RemoveAll(root)
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
