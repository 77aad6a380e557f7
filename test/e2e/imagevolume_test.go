package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Image volumes (KEP-4639): the testapp image (busybox's layer and the
// testapp's, so an overlay of two) pushed to a loopback registry that wants
// basic auth is pulled with the pod's pull secret and mounted read-only,
// whole and by a subPath; what it leaves on the host (its snapshot, its
// mount) goes with the pod. An absent image with pullPolicy Never, a pull
// without credentials and a missing subPath fail as the kubelet's.
func TestImageVolume(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	reg := privateRegistry(t, &images.BasicAuth{User: "puller", Password: "pw"})
	ref, err := reg.Push(ctx, localImage(t, images.TestappRef), "vol/testapp:1.0")
	if err != nil {
		t.Fatal(err)
	}
	pullSecret(t, ns, reg.Addr(), "puller", "pw")
	volPod := func(name, image string, policy v1.PullPolicy, mounts ...v1.VolumeMount) *v1.Pod {
		p := busybox(ns, name, "sleep", "3600")
		p.Spec.Volumes = []v1.Volume{{Name: "img", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: image, PullPolicy: policy}}}}
		p.Spec.Containers[0].VolumeMounts = mounts
		p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		return p
	}

	t.Run("mounted read-only", func(t *testing.T) {
		pod := volPod("reader", ref, v1.PullAlways,
			v1.VolumeMount{Name: "img", MountPath: "/vol"},
			v1.VolumeMount{Name: "img", MountPath: "/bin-only", SubPath: "bin"})
		// An image volume no container mounts is never pulled: absent,
		// it fails nothing.
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "unused", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: reg.Addr() + "/absent:1.0", PullPolicy: v1.PullNever}}})
		// An image of one layer (its view is a bind of the layer itself),
		// present on the node.
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "one", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: images.BusyboxRef, PullPolicy: v1.PullIfNotPresent}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "one", MountPath: "/one"})
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		created := cluster.CreatePod(t, pod)
		start := time.Now()
		waitReady(t, ns, pod.Name)
		t.Logf("ready after %s", time.Since(start).Round(time.Millisecond))
		if want := fmt.Sprintf("Pulling image %q", ref); waitEvent(t, ns, pod.Name, "Pulling") != want {
			t.Errorf("no event %q; events %q", want, events(t, ns, pod.Name))
		}
		awaitEvent(t, ns, pod.Name, func(reason, msg string) bool {
			return reason == "Pulled" && strings.HasPrefix(msg, fmt.Sprintf("Successfully pulled image %q", ref))
		})

		// Both layers are seen: busybox's and the testapp's on top.
		out := execIn(t, ns, pod.Name, "c", "sh", "-c", "test -x /vol/testapp && test -x /vol/bin/busybox && test -x /bin-only/busybox && test -x /one/bin/busybox && test ! -e /one/testapp && echo ok")
		if strings.TrimSpace(out) != "ok" {
			t.Errorf("image files not seen: %q", out)
		}
		// Not noexec, as CRI binds it (rbind, rprivate, ro).
		if out := execIn(t, ns, pod.Name, "c", "/vol/bin/busybox", "echo", "ran"); strings.TrimSpace(out) != "ran" {
			t.Errorf("running a program of the image: %q", out)
		}
		// Read-only, though the volumeMount did not ask for it.
		for _, p := range []string{"/vol/new", "/vol/testapp", "/bin-only/new", "/one/new", "/one/bin/busybox"} {
			out := execIn(t, ns, pod.Name, "c", "sh", "-c", "touch "+p+" 2>&1; echo rc=$?")
			if !strings.Contains(out, "Read-only file system") || strings.Contains(out, "rc=0") {
				t.Errorf("writing %s: %q, want EROFS", p, out)
			}
		}

		// On the host: one snapshot of the pod's, mounted under its
		// volume's directory.
		volDir := filepath.Join(node.RootDir(), "pods", string(created.UID), "volumes", "kubernetes.io~image", "img")
		if snaps := imageVolumeSnapshots(t, string(created.UID)); len(snaps) != 2 {
			t.Errorf("image volume snapshots %q, want two", snaps)
		}
		if ms := mountsUnder(t, volDir); len(ms) != 1 {
			t.Errorf("mounts under %s: %q, want one", volDir, ms)
		}

		start = time.Now()
		deletePod(t, ns, pod.Name)
		waitGone(t, ns, pod.Name)
		t.Logf("gone after %s", time.Since(start).Round(time.Millisecond))
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(imageVolumeSnapshots(t, string(created.UID))) == 0 && len(mountsUnder(t, volDir)) == 0, nil
		})
		if err != nil {
			t.Errorf("after the pod's deletion: snapshots %q, mounts %q", imageVolumeSnapshots(t, string(created.UID)), mountsUnder(t, volDir))
		}
	})

	// A hostlet restarted under a running pod mounts the same snapshot for
	// the pod's next container; one restarted after the pod was deleted
	// meanwhile releases it.
	t.Run("across restarts", func(t *testing.T) {
		pod := volPod("restarted", ref, v1.PullIfNotPresent, v1.VolumeMount{Name: "img", MountPath: "/vol"})
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		pod.Spec.Containers[0].Command = []string{"sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 0.2; done"}
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		created := cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		uid := string(created.UID)
		volDir := filepath.Join(node.RootDir(), "pods", uid, "volumes", "kubernetes.io~image", "img")
		before := imageVolumeSnapshots(t, uid)
		if len(before) != 1 {
			t.Fatalf("snapshots %q, want one", before)
		}

		node.Kill()
		// As after a reboot: the snapshot is there, its mount is not (the
		// running container keeps its own bind).
		for _, m := range mountsUnder(t, volDir) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
		}
		if err := node.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		// The container exits by itself; its next instance is started by
		// the restarted hostlet.
		execIn(t, ns, pod.Name, "c", "touch", "/tmp/stop")
		if _, err := cluster.WaitForPod(ctx, ns, pod.Name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].Ready, nil
		}); err != nil {
			t.Fatalf("container not restarted: %v", err)
		}
		if out := execIn(t, ns, pod.Name, "c", "sh", "-c", "test -x /vol/testapp && echo ok"); strings.TrimSpace(out) != "ok" {
			t.Errorf("image files not seen after the restart: %q", out)
		}
		if after := imageVolumeSnapshots(t, uid); len(after) != 1 || after[0] != before[0] {
			t.Errorf("snapshots %q after the restart, want %q again", after, before)
		}
		if ms := mountsUnder(t, volDir); len(ms) != 1 {
			t.Errorf("mounts under %s: %q, want one", volDir, ms)
		}

		node.Kill()
		if err := cluster.Client().CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ns, pod.Name)
		if err := node.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, time.Minute, "the deleted pod's image volume to be released", func() bool {
			return len(imageVolumeSnapshots(t, uid)) == 0 && len(mountsUnder(t, volDir)) == 0
		})
	})

	// In a pod with its own user namespace the image's files are its
	// root's, as with CRI, which idmaps the image volume's layers.
	t.Run("user namespace", func(t *testing.T) {
		pod := usernsPod(ns, "userns", "stat -c '%u %g' /vol/testapp /vol/bin; test -x /vol/testapp && echo ok")
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "img", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: v1.PullIfNotPresent}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "img", MountPath: "/vol"})
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		out := runUserns(t, pod)
		if want := "0 0\n0 0\nok\n"; out != want {
			t.Errorf("output %q, want %q", out, want)
		}
		// The pod ended: its image volume is released with its other
		// volumes, before its deletion.
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pollUntil(t, time.Minute, "the ended pod's image volume to be released", func() bool {
			return len(imageVolumeSnapshots(t, string(p.UID))) == 0
		})
	})

	t.Run("Never and absent", func(t *testing.T) {
		image := reg.Addr() + "/absent:1.0"
		pod := volPod("never", image, v1.PullNever, v1.VolumeMount{Name: "img", MountPath: "/vol"})
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "ErrImageNeverPull")
		if want := fmt.Sprintf("Container image %q is not present with pull policy of Never", image); w.Message != want {
			t.Errorf("message %q, want %q", w.Message, want)
		}
		waitEvent(t, ns, pod.Name, "ErrImageNeverPull")
	})

	t.Run("pull without credentials", func(t *testing.T) {
		pod := volPod("denied", ref, v1.PullAlways, v1.VolumeMount{Name: "img", MountPath: "/vol"})
		cluster.CreatePod(t, pod)
		waitWaiting(t, ns, pod.Name, "ErrImagePull")
		w := waitWaiting(t, ns, pod.Name, "ImagePullBackOff")
		// The back-off names the volume's image, not the container's.
		if want := fmt.Sprintf("Back-off pulling image %q", ref); !strings.HasPrefix(w.Message, want) {
			t.Errorf("ImagePullBackOff message %q, want %q...", w.Message, want)
		}
		awaitEvent(t, ns, pod.Name, func(reason, msg string) bool {
			return reason == "Failed" && strings.HasPrefix(msg, fmt.Sprintf("Failed to pull image %q", ref))
		})
	})

	t.Run("missing subPath", func(t *testing.T) {
		pod := volPod("nosub", ref, v1.PullIfNotPresent, v1.VolumeMount{Name: "img", MountPath: "/vol", SubPath: "not-existing"})
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		created := cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "CreateContainerError")
		if !strings.HasPrefix(w.Message, `failed to mount image volume: ImageVolumeMountFailed: failed to ensure image subpath "not-existing"`) {
			t.Errorf("message %q", w.Message)
		}
		// The volume was mounted for it: the deletion releases it too.
		deletePod(t, ns, pod.Name)
		waitGone(t, ns, pod.Name)
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(imageVolumeSnapshots(t, string(created.UID))) == 0, nil
		})
		if err != nil {
			t.Errorf("snapshots left: %q", imageVolumeSnapshots(t, string(created.UID)))
		}
	})
}

// imageVolumeSnapshots are the image volume snapshots of the pod uid.
func imageVolumeSnapshots(t *testing.T, uid string) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(ctxT(t), harness.ContainerdNamespace)
	var out []string
	err := cluster.ContainerdClient().SnapshotService("").Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		out = append(out, info.Name)
		return nil
	}, fmt.Sprintf(`labels."hostlet.io/image-volume.owner"==%q`, uid))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mountsUnder are the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

// Image GC counts an image an image volume is mounted from as in use, as
// the kubelet's does: on a node of its own containerd namespace, with
// every image old enough, the GC round that removes the unused image keeps
// the volume's.
func TestImageGCKeepsImageVolumes(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-imagegc-vol"
	const ctrdNS = "hostlet-imagegc-vol"
	cl, nctx := imageGCNamespace(t, ctrdNS)
	// Images are safe for their first 30 s (as in TestImageGC): time for
	// the pod to mount one.
	extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--containerd-namespace", ctrdNS,
		"--image-gc-high-threshold", "1",
		"--image-gc-low-threshold", "0",
		"--image-minimum-gc-age", "30s",
		"--image-gc-period", "2s",
	}})
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "user", "sleep", "3600")
	pod.Spec.NodeName = name
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "img", VolumeSource: v1.VolumeSource{
		Image: &v1.ImageVolumeSource{Reference: images.TestappRef, PullPolicy: v1.PullNever}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "img", MountPath: "/vol"}}
	created := cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)

	present := func(ref string) bool {
		_, err := cl.ImageService().Get(nctx, ref)
		return err == nil
	}
	pollUntil(t, 2*time.Minute, "the unused image to be collected", func() bool { return !present(images.TestappStopSignalRef) })
	if !present(images.TestappRef) || !present(images.BusyboxRef) {
		t.Errorf("an image in use was collected: volume's %v, container's %v", present(images.TestappRef), present(images.BusyboxRef))
	}
	if out := execIn(t, ns, pod.Name, "c", "sh", "-c", "test -x /vol/testapp && echo ok"); strings.TrimSpace(out) != "ok" {
		t.Errorf("image volume: %q", out)
	}

	deletePod(t, ns, pod.Name)
	waitGone(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the pod's image volume to be released", func() bool {
		var n int
		_ = cl.SnapshotService("").Walk(nctx, func(context.Context, snapshots.Info) error { n++; return nil },
			fmt.Sprintf(`labels."hostlet.io/image-volume.owner"==%q`, string(created.UID)))
		return n == 0
	})
}
