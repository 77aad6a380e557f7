package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"syscall"
	"time"

	apitypes "github.com/containerd/containerd/api/types"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/typeurl/v2"
	"github.com/hostlet/hostlet/crash"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// IDMap is a pod's user namespace: container IDs 0..Size-1 are the host IDs
// HostID..HostID+Size-1, for users and groups alike (the kubelet's mapping).
type IDMap struct {
	HostID uint32 `json:"hostID"`
	Size   uint32 `json:"size"`
}

func (m IDMap) linux() []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.HostID, Size: m.Size}}
}

func (m IDMap) sys() []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostID), Size: int(m.Size)}}
}

// pinUserNS makes the user namespace of a pod and, owned by it, the
// network, IPC and UTS namespaces (and the PID namespace when the pod
// shares one), as CRI's pause container holds them for a pod with
// hostUsers: false. Namespaces owned by the pod's user namespace let its
// root mount sysfs, mqueue and proc and set its own sysctls, and nothing of
// the host's. A short-lived hostlet child makes them all at once; each is
// pinned by a bind mount in the pod dir (the netns under <root>/netns).
func (r *Runtime) pinUserNS(s *Sandbox, cfg SandboxConfig) error {
	m := *cfg.UserNS
	// The child runs as the pod's root, which may not traverse the path to
	// hostlet's binary (a 0700 home): it executes the already open file.
	exe, err := os.Open(r.executable)
	if err != nil {
		return fmt.Errorf("opening hostlet's executable: %w", err)
	}
	defer exe.Close()
	// When it stays as the pod's PID 1, the pod's processes can reach its
	// root and cwd through /proc/1: it runs in an empty directory.
	empty := filepath.Join(r.rootDir, "empty")
	if err := os.MkdirAll(empty, 0o555); err != nil {
		return err
	}
	root, err := os.Open(empty)
	if err != nil {
		return err
	}
	defer root.Close()
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	share := cfg.ShareProcessNamespace
	if share {
		flags |= unix.CLONE_NEWPID
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       []string{r.executable, pauseArg, s.Dir},
		Dir:        "/",
		ExtraFiles: []*os.File{exe, root},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags, Setsid: true,
			UidMappings: m.sys(), GidMappings: m.sys(),
			// The pod's root, not the host's root in the pod's namespace.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			// Containers set their supplementary groups.
			GidMappingsEnableSetgroups: true,
		},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("creating the pod's user namespace: %w", err)
	}
	pid := cmd.Process.Pid
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	proc := fmt.Sprintf("/proc/%d/ns/", pid)
	pin := func(ns, path string) error {
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount(proc+ns, path, "", unix.MS_BIND, ""); err != nil {
			_ = os.Remove(path)
			return fmt.Errorf("pinning %s namespace: %w", ns, err)
		}
		return nil
	}
	userPath, ipcPath, utsPath := filepath.Join(s.Dir, "user"), filepath.Join(s.Dir, "ipc"), filepath.Join(s.Dir, "uts")
	fail := func(err error) error {
		stop()
		unpinNamespace(userPath)
		unpinNamespace(ipcPath)
		unpinNamespace(utsPath)
		return err
	}
	for _, p := range [][2]string{{"user", userPath}, {"ipc", ipcPath}, {"uts", utsPath}} {
		if err := pin(p[0], p[1]); err != nil {
			return fail(err)
		}
	}
	if err := setHostname(utsPath, cfg.Hostname); err != nil {
		return fail(err)
	}
	ns, err := netns.NewNetNSFromPID(filepath.Join(r.rootDir, "netns"), uint32(pid))
	if err != nil {
		return fail(fmt.Errorf("pinning network namespace: %w", err))
	}
	s.UserNSPath, s.IPCNSPath, s.UTSNSPath, s.NetNSPath, s.IDMap = userPath, ipcPath, utsPath, ns.GetPath(), &m
	if share {
		// The child stays as the pod's PID 1, reaped whenever it ends.
		s.PausePID = pid
		go func() { _ = cmd.Wait() }()
		// No container joins before it left the host's root.
		for i := 0; ; i++ {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); l == empty {
				break
			}
			if i == 200 {
				return fail(fmt.Errorf("the pod's PID 1 did not start"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		stop()
	}
	return nil
}

// setHostname sets the hostname in a pinned UTS namespace, from a thread
// that is discarded afterwards.
func setHostname(utsPath, hostname string) error {
	errc := make(chan error, 1)
	go func() {
		defer crash.Recover(log.WithField("uts", utsPath), func(msg string) { errc <- fmt.Errorf("panic: %s", msg) })
		goruntime.LockOSThread()
		errc <- func() error {
			f, err := os.Open(utsPath)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS); err != nil {
				return fmt.Errorf("joining the pod's UTS namespace: %w", err)
			}
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				return fmt.Errorf("sethostname %q: %w", hostname, err)
			}
			return nil
		}()
	}()
	return <-errc
}

// withPodUserNS puts the container into its pod's user namespace, with the
// mappings runc checks against the namespace.
func withPodUserNS(path string, m IDMap) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		ns := specs.LinuxNamespace{Type: specs.UserNamespace, Path: path}
		found := false
		for i, n := range s.Linux.Namespaces {
			if n.Type == specs.UserNamespace {
				s.Linux.Namespaces[i], found = ns, true
			}
		}
		if !found {
			s.Linux.Namespaces = append(s.Linux.Namespaces, ns)
		}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m.linux(), m.linux()
		return nil
	}
}

// idmapMounts gives bind mounts the pod's mapping, as the kubelet asks CRI
// for every mount of a pod with hostUsers: false: files owned by root on the
// host are the pod's root's, and what the pod writes lands with the IDs it
// sees, not the high host IDs.
func idmapMounts(mounts []specs.Mount, m IDMap) {
	for i := range mounts {
		if mounts[i].Type == "bind" {
			mounts[i].UIDMappings, mounts[i].GIDMappings = m.linux(), m.linux()
		}
	}
}

// snapshotOpts remaps the container's root filesystem to the pod's IDs:
// containerd's overlay snapshotter mounts the image layers idmapped (the
// labels CRI sets), without copying them.
func snapshotOpts(m *IDMap) []snapshots.Opt {
	if m == nil {
		return nil
	}
	return []snapshots.Opt{containerd.WithUserNSRemapperLabels(m.linux(), m.linux())}
}

// pauseRootFD is the directory a pod's PID 1 in a user namespace chroots
// into (see pinUserNS).
const pauseRootFD = 4

// enterPauseRoot chroots the pause process into the directory passed at
// pauseRootFD, if any.
func enterPauseRoot() {
	var st unix.Stat_t
	if unix.Fstat(pauseRootFD, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	if unix.Fchdir(pauseRootFD) != nil || unix.Chroot(".") != nil {
		os.Exit(1)
	}
	// fd 3 is hostlet's executable that pinUserNS ran.
	_ = unix.Close(pauseRootFD)
	_ = unix.Close(pauseRootFD - 1)
}

// ErrUserNSUnsupported is why a pod with hostUsers: false cannot run here.
var ErrUserNSUnsupported = errors.New("runtime does not support user namespaces")

// UserNamespacesSupported checks once what a pod with hostUsers: false
// needs: user namespaces, idmapped mounts of the filesystems hostlet's pod
// dirs and tmpfs volumes live on, and a snapshotter that remaps image layers
// with idmapped mounts. The error says what is missing.
func (r *Runtime) UserNamespacesSupported(ctx context.Context) error {
	r.usernsOnce.Do(func() { r.usernsErr = r.checkUserNS(ctx) })
	return r.usernsErr
}

func (r *Runtime) checkUserNS(ctx context.Context) error {
	dir, err := os.MkdirTemp(filepath.Join(r.rootDir, "pods"), ".userns-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := &Sandbox{Dir: dir}
	cfg := SandboxConfig{Hostname: "check", UserNS: &IDMap{HostID: 65536, Size: 65536}}
	if err := r.pinUserNS(s, cfg); err != nil {
		return fmt.Errorf("%w: %v", ErrUserNSUnsupported, err)
	}
	defer func() {
		unpinNamespace(s.IPCNSPath)
		unpinNamespace(s.UTSNSPath)
		_ = netns.LoadNetNS(s.NetNSPath).Remove()
	}()
	defer unpinNamespace(s.UserNSPath)
	tmpfs := filepath.Join(dir, "tmpfs")
	if err := os.Mkdir(tmpfs, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=4k"); err != nil {
		return err
	}
	defer unix.Unmount(tmpfs, unix.MNT_DETACH)
	for _, p := range []string{dir, tmpfs} {
		if err := tryIDMap(p, s.UserNSPath); err != nil {
			return fmt.Errorf("%w: idmapped mounts on %s: %v", ErrUserNSUnsupported, p, err)
		}
	}
	caps, err := r.client.GetSnapshotterCapabilities(ctx, defaults.DefaultSnapshotter)
	if err != nil {
		return fmt.Errorf("%w: snapshotter: %v", ErrUserNSUnsupported, err)
	}
	if !slices.Contains(caps, "remap-ids") {
		return fmt.Errorf("%w: snapshotter %q cannot remap image layers with idmapped mounts", ErrUserNSUnsupported, defaults.DefaultSnapshotter)
	}
	if err := r.ociRuntimeSupportsUserNS(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrUserNSUnsupported, err)
	}
	return nil
}

// ociRuntimeSupportsUserNS asks the runtime (runc features, through
// containerd) for user namespaces and idmapped mounts, as CRI decides a
// runtime handler's userNamespaces feature.
func (r *Runtime) ociRuntimeSupportsUserNS(ctx context.Context) error {
	f, err := r.ociRuntimeFeatures(ctx)
	if err != nil {
		return err
	}
	if f.Linux == nil || !slices.Contains(f.Linux.Namespaces, "user") {
		return fmt.Errorf("runtime %s has no user namespaces", defaults.DefaultRuntime)
	}
	if m := f.Linux.MountExtensions; m == nil || m.IDMap == nil || m.IDMap.Enabled == nil || !*m.IDMap.Enabled {
		return fmt.Errorf("runtime %s has no idmapped mounts", defaults.DefaultRuntime)
	}
	return nil
}

// ociRuntimeFeatures are the default runtime's features ("runc features"),
// as containerd's introspection service reports them.
func (r *Runtime) ociRuntimeFeatures(ctx context.Context) (*features.Features, error) {
	req := &apitypes.RuntimeRequest{RuntimePath: defaults.DefaultRuntime}
	resp, err := r.client.IntrospectionService().PluginInfo(ctx, string(plugins.RuntimePluginV2), "task", req)
	if err != nil {
		return nil, fmt.Errorf("runtime features: %w", err)
	}
	var info apitypes.RuntimeInfo
	if resp.Extra == nil {
		return nil, fmt.Errorf("runtime %s reports no features", defaults.DefaultRuntime)
	}
	if err := typeurl.UnmarshalTo(resp.Extra, &info); err != nil {
		return nil, fmt.Errorf("runtime features: %w", err)
	}
	if info.Features == nil {
		return nil, fmt.Errorf("runtime %s reports no features", defaults.DefaultRuntime)
	}
	x, err := typeurl.UnmarshalAny(info.Features)
	if err != nil {
		return nil, fmt.Errorf("runtime features: %w", err)
	}
	f, ok := x.(*features.Features)
	if !ok {
		return nil, fmt.Errorf("runtime %s reports features of type %T", defaults.DefaultRuntime, x)
	}
	return f, nil
}

// tryIDMap makes a detached idmapped clone of path, as runc will for a
// volume, and throws it away.
func tryIDMap(path, userns string) error {
	ns, err := os.Open(userns)
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return nil
}
