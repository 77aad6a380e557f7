package podspec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// releaseRuntime records what a release asks of containerd; the pod has
// one running container (left by a hostlet restarted after the pod ended)
// and one exited.
type releaseRuntime struct {
	ContainerRuntime
	calls   []string
	cgroups bool // the pod's cgroup was removed
}

func (f *releaseRuntime) ListContainers(context.Context, string) ([]runtime.ContainerStatus, error) {
	return []runtime.ContainerStatus{{ID: "run", State: runtime.StateRunning}, {ID: "done", State: runtime.StateExited}}, nil
}

func (f *releaseRuntime) StopContainer(_ context.Context, id string, _ unix.Signal, _ time.Duration) error {
	f.calls = append(f.calls, "stop "+id)
	return nil
}

func (f *releaseRuntime) RemoveContainer(_ context.Context, id string) error {
	f.calls = append(f.calls, "remove "+id)
	return nil
}

func (f *releaseRuntime) RemoveSandbox(context.Context, string) error {
	f.calls = append(f.calls, "sandbox")
	return nil
}

func (f *releaseRuntime) ReleaseImageVolumes(context.Context, string) error {
	f.calls = append(f.calls, "image volumes")
	return nil
}

func (f *releaseRuntime) PodCgroupState(string, string) (runtime.PodCgroupState, bool, error) {
	return runtime.PodCgroupState{}, !f.cgroups, nil
}

func (f *releaseRuntime) RemovePodCgroup(string) error {
	f.calls = append(f.calls, "cgroup")
	f.cgroups = true
	return nil
}

func (f *releaseRuntime) RemoveLogs(string, string, string) { f.calls = append(f.calls, "logs") }

// A pod that ended loses its volumes (a memory-backed emptyDir, a disk
// one, a configMap and a subPath bind into one of them, all unmounted),
// its sandbox and its cgroup; its containers (stopped, not removed), its
// logs and its containers' termination messages stay. Its volumes are
// never written again, however the refresh or a label change asks.
func TestReleasePod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for tmpfs and bind mounts")
	}
	root := t.TempDir()
	r := fuzzRuntime(root)
	fake := &releaseRuntime{}
	r.rt = fake
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "p", "ns", types.UID("uid1")
	r.cfg.Pod = func(types.UID) *v1.Pod { return pod }
	mem := resource.MustParse("1Mi")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &mem}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
	}
	ctx := context.Background()
	must(t, r.setupVolumes(ctx, pod, nil))
	podDir := r.layout().PodDir("uid1")
	t.Cleanup(func() { _ = r.teardownVolumes("uid1") })
	must(t, os.MkdirAll(filepath.Join(r.volumeDir(pod, "d"), "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(r.volumeDir(pod, "d"), "sub", "f"), []byte("x"), 0o644))
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "d", MountPath: "/m", SubPath: "sub"}}}
	if _, err := r.containerMounts(context.Background(), pod, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	termLog := filepath.Join(podDir, "containers", "app", "abc-termination-log")
	must(t, os.MkdirAll(filepath.Dir(termLog), 0o755))
	must(t, os.WriteFile(termLog, []byte("bye"), 0o644))

	r.ReleasePod(ctx, pod)
	for _, d := range []string{r.layout().PodVolumesDir("uid1"), r.layout().PodSubPathsDir("uid1")} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", d, err)
		}
	}
	if ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(podDir)); err != nil || len(ms) != 0 {
		t.Errorf("still mounted under the pod dir: %d %v", len(ms), err)
	}
	if b, err := os.ReadFile(termLog); err != nil || string(b) != "bye" {
		t.Errorf("termination message %q %v, want it kept", b, err)
	}
	if want := []string{"stop run", "sandbox", "image volumes", "cgroup"}; !slices.Equal(fake.calls, want) {
		t.Errorf("runtime calls %q, want %q", fake.calls, want)
	}

	// Nothing writes the volumes again.
	r.tokens.scheduleResync(pod, time.Now())
	r.tokens.podUpdated(pod, &v1.Pod{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec, Status: pod.Status})
	r.tokens.mu.Lock()
	_, due := r.tokens.due[pod.UID]
	r.tokens.mu.Unlock()
	if due {
		t.Error("a released pod is scheduled for a volume refresh")
	}
	r.tokens.refresh(ctx, pod.UID)
	if _, err := os.Lstat(filepath.Join(podDir, "volumes")); !os.IsNotExist(err) {
		t.Errorf("a refresh wrote the volumes of a released pod again: %v", err)
	}

	// Released again (the sweep after a restart): nothing more to remove.
	fake.calls = nil
	r.ReleasePod(ctx, pod)
	if want := []string{"stop run", "sandbox", "image volumes", "cgroup"}; !slices.Equal(fake.calls, want) {
		t.Errorf("second release: %q", fake.calls)
	}
	// The pod's deletion removes the rest.
	fake.calls = nil
	r.Cleanup(ctx, "uid1", "ns", "p")
	if _, err := os.Lstat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod dir after cleanup: %v", err)
	}
	if !slices.Contains(fake.calls, "logs") || !slices.Contains(fake.calls, "remove done") {
		t.Errorf("cleanup calls %q, want the containers and logs removed", fake.calls)
	}
}
