package runtime

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Recursive read-only mounts (a volumeMount's recursiveReadOnly): runc
// makes them with mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY) for its
// "rro" mount option, which the kernel has from 5.12. containerd's CRI
// reports a handler able to when both hold, and so does hostlet without CRI.

// recursiveReadOnlySupported says, checked once, whether the default
// runtime takes "rro" and the kernel can apply it.
func (r *Runtime) recursiveReadOnlySupported(ctx context.Context) bool {
	r.rroOnce.Do(func() {
		f, err := r.ociRuntimeFeatures(ctx)
		r.rro = err == nil && slices.Contains(f.MountOptions, "rro") && kernelAtLeast(kernelRelease(), 5, 12)
	})
	return r.rro
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast compares a kernel release ("6.8.0-45-generic") with
// major.minor; one it cannot read is older.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return false
	}
	minorDigits := parts[1]
	if i := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = parts[1][:i]
	}
	mi, err := strconv.Atoi(minorDigits)
	if err != nil {
		return false
	}
	return maj > major || maj == major && mi >= minor
}

// checkRecursiveReadOnly refuses what CRI refuses of a recursive read-only
// mount: one that is not read-only, or a handler that cannot make it.
func checkRecursiveReadOnly(mounts []Mount, h *RuntimeHandler) error {
	for _, m := range mounts {
		if !m.RecursiveReadOnly {
			continue
		}
		if !m.ReadOnly {
			return fmt.Errorf("recursive read-only mount conflicts with RW mount (hostPath=%q)", m.HostPath)
		}
		if !h.RecursiveReadOnlyMounts {
			return fmt.Errorf("runtime handler does not support recursive read-only mounts (hostPath=%q)", m.HostPath)
		}
	}
	return nil
}
