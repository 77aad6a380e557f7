package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// pinIPCUTS creates a new IPC and UTS namespace pair carrying the pod's
// hostname and bind-mounts both onto files in dir, so every container of the
// pod can join them by path: what a pause container's namespaces give CRI,
// without a process.
func pinIPCUTS(dir, hostname string) (ipcPath, utsPath string, err error) {
	ipcPath, utsPath = filepath.Join(dir, "ipc"), filepath.Join(dir, "uts")
	for _, p := range []string{ipcPath, utsPath} {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return "", "", err
		}
		f.Close()
	}
	errc := make(chan error, 1)
	go func() {
		defer crash.Recover(log.WithField("sandbox", dir), func(msg string) { errc <- fmt.Errorf("panic: %s", msg) })
		// The thread is never unlocked: Go discards it when the goroutine
		// ends, so no other goroutine ever runs in the pod's namespaces.
		goruntime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				return fmt.Errorf("sethostname %q: %w", hostname, err)
			}
			task := fmt.Sprintf("/proc/%d/task/%d/ns/", os.Getpid(), unix.Gettid())
			if err := unix.Mount(task+"ipc", ipcPath, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("pinning IPC namespace: %w", err)
			}
			if err := unix.Mount(task+"uts", utsPath, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("pinning UTS namespace: %w", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		unpinNamespace(ipcPath)
		unpinNamespace(utsPath)
		return "", "", err
	}
	return ipcPath, utsPath, nil
}

// nsPinned reports whether path still holds a namespace (nsfs) bind mount.
func nsPinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// unpinNamespace releases a pinned namespace; the kernel frees it once no
// process is left in it.
func unpinNamespace(path string) {
	if path == "" {
		return
	}
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}

// shmSize is the pod's /dev/shm, containerd CRI's default for sandboxes.
const shmSize = "size=65536k"

// mountShm gives the pod one /dev/shm all its containers share, like its
// IPC namespace.
func mountShm(path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return err
	}
	if isMountPoint(path) {
		return nil
	}
	return unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,"+shmSize)
}

func isMountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(path, &st) != nil || unix.Stat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

func unmountShm(path string) {
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}

// PIDNamespace is the PID namespace of a running container, by path, for an
// ephemeral container that targets it (CRI's NamespaceMode_TARGET).
func (r *Runtime) PIDNamespace(ctx context.Context, id string) (string, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return "", err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/ns/pid", task.Pid()), nil
}
