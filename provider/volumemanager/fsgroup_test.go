package volumemanager

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// OnRootMismatch walks a volume only while its root lacks what the walk
// gives (group, group permissions, setgid), as the kubelet's
// skipPermissionChange; Always (or none) walks every time.
func TestFSGroupOnRootMismatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	mustOK(t, os.WriteFile(file, nil, 0o600))
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
		FSGroup: ptr.To(int64(4321)), FSGroupChangePolicy: ptr.To(v1.FSGroupChangeOnRootMismatch)}}}
	group := func(p string) uint32 {
		fi, err := os.Lstat(p)
		mustOK(t, err)
		return fi.Sys().(*syscall.Stat_t).Gid
	}
	// The root mismatches: the whole volume is walked.
	mustOK(t, applyFSGroupPolicy(dir, pod, false))
	if group(file) != 4321 || group(dir) != 4321 {
		t.Fatalf("not walked: file %d, root %d", group(file), group(dir))
	}
	// The root matches now: a file the walk would change is left alone.
	mustOK(t, os.Chown(file, -1, 0))
	mustOK(t, applyFSGroupPolicy(dir, pod, false))
	if group(file) != 0 {
		t.Errorf("walked with a matching root")
	}
	// A root whose mode lost the group's write bit mismatches again.
	mustOK(t, os.Chmod(dir, 0o2750))
	mustOK(t, applyFSGroupPolicy(dir, pod, false))
	if group(file) != 4321 {
		t.Errorf("not walked with a mismatching mode")
	}
	// Always walks whatever the root.
	mustOK(t, os.Chown(file, -1, 0))
	pod.Spec.SecurityContext.FSGroupChangePolicy = ptr.To(v1.FSGroupChangeAlways)
	mustOK(t, applyFSGroupPolicy(dir, pod, false))
	if group(file) != 4321 {
		t.Errorf("Always did not walk")
	}
}
