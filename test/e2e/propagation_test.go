package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// propagationMount binds dir (a hostPath) at the container's path with
// the given propagation.
func propagationMount(pod *v1.Pod, name, dir, path string, mode v1.MountPropagationMode) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, hostPathVolume(name, dir, v1.HostPathDirectoryOrCreate))
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: name, MountPath: path, MountPropagation: &mode})
}

// bindOntoItself makes dir a mount point of its own with the given
// propagation flag (unix.MS_SHARED, unix.MS_PRIVATE), unmounted when the
// test ends (with whatever is mounted below it).
func bindOntoItself(t *testing.T, dir string, flag uintptr) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", flag, ""); err != nil {
		t.Fatal(err)
	}
}

// onSharedMount: the mount path is on is a shared one.
func onSharedMount(t *testing.T, path string) bool {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil {
		t.Fatal(err)
	}
	var on *mountinfo.Info
	for _, m := range mounts {
		if on == nil || len(m.Mountpoint) >= len(on.Mountpoint) {
			on = m
		}
	}
	return on != nil && strings.Contains(on.Optional, "shared:")
}

// Mount propagation as the kubelet and CRI give it: hostlet's root dir is
// a shared mount; a privileged pod with Bidirectional hostPath mounts (of
// a shared dir, as systemd makes /, and of a dir under the root dir's
// plugins, as CSI node plugins have) mounts a tmpfs in each, which the host
// sees and a pod with HostToContainer mounts of the same dirs, started
// before, sees too, while a pod without propagation sees the empty dir;
// the unmount reaches them all the same way. A Bidirectional mount in a
// container that is not privileged is refused by the API server, with the
// message hostlet would give too, and a Bidirectional mount of a dir on a
// private mount fails the container with CRI's message.
func TestMountPropagation(t *testing.T) {
	skipIfNoCluster(t)
	if !onSharedMount(t, node.RootDir()) {
		t.Errorf("hostlet's root dir %s is not on a shared mount", node.RootDir())
	}
	ns := cluster.NewNamespace(t)
	shared := t.TempDir()
	bindOntoItself(t, shared, unix.MS_SHARED)
	plugin := filepath.Join(node.RootDir(), "plugins", "propagation.test", ns)
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(plugin, "mnt"), unix.MNT_DETACH); _ = os.RemoveAll(plugin) })
	for _, d := range []string{shared, plugin} {
		if err := os.MkdirAll(filepath.Join(d, "mnt"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	podWith := func(name string, mode v1.MountPropagationMode, privileged bool) *v1.Pod {
		pod := busybox(ns, name, "sleep", "3600")
		pod.Spec.NodeName = nodeName
		pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
		if privileged {
			pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: ptr(true)}
		}
		propagationMount(pod, "shared", shared, "/shared", mode)
		propagationMount(pod, "plugin", plugin, "/plugin", mode)
		return pod
	}
	// Both before the mounts are made: they see them only through
	// propagation.
	cluster.CreatePod(t, podWith("sub", v1.MountPropagationHostToContainer, false))
	cluster.CreatePod(t, podWith("private", v1.MountPropagationNone, false))
	cluster.CreatePod(t, podWith("pub", v1.MountPropagationBidirectional, true))
	for _, p := range []string{"sub", "private", "pub"} {
		waitReady(t, ns, p)
	}
	for _, d := range []string{"shared", "plugin"} {
		execIn(t, ns, "pub", "c", "sh", "-c", "mount -t tmpfs tmpfs /"+d+"/mnt && echo "+d+" > /"+d+"/mnt/f")
	}
	for d, host := range map[string]string{"shared": shared, "plugin": plugin} {
		if b, err := os.ReadFile(filepath.Join(host, "mnt", "f")); err != nil || string(b) != d+"\n" {
			t.Errorf("the host reads %q %v from the pod's mount in %s", b, err, host)
		}
		if out := execIn(t, ns, "sub", "c", "cat", "/"+d+"/mnt/f"); out != d+"\n" {
			t.Errorf("the HostToContainer pod reads %q in /%s/mnt", out, d)
		}
		if out := execIn(t, ns, "private", "c", "ls", "-A", "/"+d+"/mnt"); out != "" {
			t.Errorf("the pod without propagation sees %q in /%s/mnt", out, d)
		}
	}
	for _, d := range []string{"shared", "plugin"} {
		execIn(t, ns, "pub", "c", "umount", "/"+d+"/mnt")
		if out := execIn(t, ns, "sub", "c", "ls", "-A", "/"+d+"/mnt"); out != "" {
			t.Errorf("the HostToContainer pod still sees %q in /%s/mnt", out, d)
		}
	}
	for _, host := range []string{shared, plugin} {
		if ok, err := mountinfo.Mounted(filepath.Join(host, "mnt")); err != nil || ok {
			t.Errorf("%s/mnt still mounted on the host (%v)", host, err)
		}
	}

	// Not privileged: refused as the API server refuses it.
	_, err := cluster.Client().CoreV1().Pods(ns).Create(ctxT(t), podWith("unprivileged", v1.MountPropagationBidirectional, false), metav1.CreateOptions{})
	if want := "Bidirectional mount propagation is available only to privileged containers"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("non-privileged Bidirectional pod: %v, want %q", err, want)
	}

	// A private host dir cannot propagate: CRI's error, not a silently
	// private mount.
	private := t.TempDir()
	bindOntoItself(t, private, unix.MS_PRIVATE)
	pod := busybox(ns, "unshared", "sleep", "3600")
	pod.Spec.NodeName = nodeName
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: ptr(true)}
	propagationMount(pod, "private", private, "/private", v1.MountPropagationBidirectional)
	cluster.CreatePod(t, pod)
	w := waitWaiting(t, ns, pod.Name, "CreateContainerError")
	if want := "is mounted on \"" + private + "\" but it is not a shared mount"; !strings.Contains(w.Message, want) {
		t.Errorf("CreateContainerError %q, want it to say %q", w.Message, want)
	}

	for _, p := range []string{"sub", "private", "pub", "unshared"} {
		removePod(t, ns, p)
	}
}
