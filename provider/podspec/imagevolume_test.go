package podspec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestImageVolumePolicy(t *testing.T) {
	for ref, want := range map[string]v1.PullPolicy{
		"busybox":                      v1.PullAlways,
		"busybox:latest":               v1.PullAlways,
		"localhost:5000/busybox":       v1.PullAlways,
		"busybox:1.35":                 v1.PullIfNotPresent,
		"localhost:5000/busybox:1.35":  v1.PullIfNotPresent,
		"busybox@sha256:" + digest64(): v1.PullIfNotPresent,
		"Bad_Name":                     v1.PullIfNotPresent,
	} {
		if got := imageVolumePolicy(&v1.ImageVolumeSource{Reference: ref}); got != want {
			t.Errorf("%s: %s, want %s", ref, got, want)
		}
	}
	if got := imageVolumePolicy(&v1.ImageVolumeSource{Reference: "busybox", PullPolicy: v1.PullNever}); got != v1.PullNever {
		t.Errorf("explicit policy: %s", got)
	}
}

func digest64() string { return strings.Repeat("ab", 32) }

// A subPath into an image volume must be a directory inside the image;
// a link out of it, a file or a missing path fail the container as CRI
// fails it (CreateContainerError, ImageVolumeMountFailed).
func TestImageSubPath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc", "ssl"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("x"), 0o644))
	must(t, os.Symlink("/etc", filepath.Join(root, "abs")))
	must(t, os.Symlink("etc/ssl", filepath.Join(root, "rel")))
	must(t, os.Symlink(outside, filepath.Join(root, "out")))
	must(t, os.Symlink("../../..", filepath.Join(root, "etc", "up")))

	for sub, want := range map[string]string{
		"etc":     filepath.Join(root, "etc"),
		"etc/ssl": filepath.Join(root, "etc", "ssl"),
		"rel":     filepath.Join(root, "etc", "ssl"),
	} {
		got, err := imageSubPath(root, sub)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", sub, got, err, want)
		}
	}
	for _, sub := range []string{"missing", "etc/os-release", "abs", "out", "etc/up", "etc/up/tmp"} {
		got, err := imageSubPath(root, sub)
		f := (*lifecycle.Failure)(nil)
		if !errors.As(err, &f) || f.Reason != "CreateContainerError" ||
			!strings.HasPrefix(f.Message, `failed to mount image volume: ImageVolumeMountFailed: failed to ensure image subpath "`+sub+`"`) {
			t.Errorf("%s: %q %v, want CreateContainerError", sub, got, err)
		}
	}
}

// Image volumes are bound read-only, whatever the volumeMount says, from
// where they were mounted; a subPath is resolved inside them.
func TestImageVolumeContainerMounts(t *testing.T) {
	r := fuzzRuntime(t.TempDir())
	pod := imageVolumePod()
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "img", MountPath: "/vol"},
		{Name: "img", MountPath: "/etc-only", SubPath: "etc"},
	}
	mounted := t.TempDir()
	must(t, os.Mkdir(filepath.Join(mounted, "etc"), 0o755))
	ms, err := r.containerMounts(context.Background(), pod, c, nil, mountedImageVolumes{"img": mounted})
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Mount{
		{HostPath: mounted, ContainerPath: "/vol", ReadOnly: true, IDMapped: true},
		{HostPath: filepath.Join(mounted, "etc"), ContainerPath: "/etc-only", ReadOnly: true, IDMapped: true},
	}
	if len(ms) != len(want) || ms[0] != want[0] || ms[1] != want[1] {
		t.Errorf("mounts %+v, want %+v", ms, want)
	}
	if _, err := r.containerMounts(context.Background(), pod, c, nil, nil); err == nil {
		t.Error("an image volume that was not mounted gave a mount")
	}
}

func imageVolumePod() *v1.Pod {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "p", "ns", types.UID("uid1")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "hostlet.local/vol:1", PullPolicy: v1.PullIfNotPresent}}},
		{Name: "unused", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "hostlet.local/absent:1", PullPolicy: v1.PullNever}}},
	}
	pod.Spec.Containers = []v1.Container{{Name: "app", Image: "hostlet.local/busybox:1.35",
		VolumeMounts: []v1.VolumeMount{{Name: "img", MountPath: "/vol"}}}}
	return pod
}

// volumePullRuntime has the images in present; it records pulls.
type volumePullRuntime struct {
	ContainerRuntime
	present map[string]bool
	pulls   []string
}

func (f *volumePullRuntime) GetImage(_ context.Context, ref string) (*runtime.Image, error) {
	if f.present[ref] {
		return &runtime.Image{Ref: ref}, nil
	}
	return nil, errdefs.ErrNotFound
}

func (f *volumePullRuntime) PullImage(_ context.Context, ref string, _ runtime.Credentials) (*runtime.Image, time.Duration, error) {
	f.pulls = append(f.pulls, ref)
	return nil, 0, errors.New("registry says no")
}

type eventList []string

func (e *eventList) Event(_ *v1.Pod, container, eventType, reason, msg string) {
	*e = append(*e, container+" "+eventType+" "+reason+": "+msg)
}

// The images of the volumes a container mounts are pulled as its pull
// policy says, with the kubelet's events on the pod (no container); a
// failure names the volume's image for the back-off. A volume no container
// mounts is never pulled.
func TestPullImageVolumes(t *testing.T) {
	r := fuzzRuntime(t.TempDir())
	fake := &volumePullRuntime{present: map[string]bool{"hostlet.local/vol:1": true}}
	r.rt = fake
	var evs eventList
	r.cfg.Events = &evs
	pod := imageVolumePod()
	c := &pod.Spec.Containers[0]

	imgs, err := r.pullImageVolumes(context.Background(), pod, c)
	if err != nil || imgs["img"] == nil || len(imgs) != 1 {
		t.Fatalf("present image: %v %v", imgs, err)
	}
	if want := ` Normal Pulled: Container image "hostlet.local/vol:1" already present on machine`; len(evs) != 1 || evs[0] != want {
		t.Errorf("events %q, want %q", evs, want)
	}

	// Never, absent.
	evs = nil
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "unused", MountPath: "/u"})
	_, err = r.pullImageVolumes(context.Background(), pod, c)
	f := (*lifecycle.Failure)(nil)
	if !errors.As(err, &f) || f.Reason != "ErrImageNeverPull" || f.Image != "hostlet.local/absent:1" ||
		f.Message != `Container image "hostlet.local/absent:1" is not present with pull policy of Never` {
		t.Errorf("Never and absent: %#v", err)
	}
	if len(evs) != 2 || !strings.HasPrefix(evs[1], " Warning ErrImageNeverPull: ") {
		t.Errorf("events %q", evs)
	}

	// Always: pulled, and the failure is the kubelet's ErrImagePull.
	evs = nil
	pod.Spec.Volumes[1].Image.PullPolicy = v1.PullAlways
	_, err = r.pullImageVolumes(context.Background(), pod, c)
	if !errors.As(err, &f) || f.Reason != "ErrImagePull" || f.Image != "hostlet.local/absent:1" {
		t.Errorf("failed pull: %#v", err)
	}
	if len(fake.pulls) != 1 || fake.pulls[0] != "hostlet.local/absent:1" {
		t.Errorf("pulls %q", fake.pulls)
	}
	if want := ` Warning Failed: Failed to pull image "hostlet.local/absent:1": registry says no`; evs[len(evs)-1] != want {
		t.Errorf("events %q, want last %q", evs, want)
	}

	// A container without image volumes pulls none.
	fake.pulls = nil
	if imgs, err := r.pullImageVolumes(context.Background(), pod, &v1.Container{Name: "other"}); err != nil || imgs != nil || fake.pulls != nil {
		t.Errorf("no image volumes: %v %v %q", imgs, err, fake.pulls)
	}
}

// HoldLazyCredentials: no lazy pulls here.
func (f *volumePullRuntime) HoldLazyCredentials(context.Context, string, runtime.Credentials) {}

// holdRuntime records the images whose lazy pull credentials are held.
type holdRuntime struct {
	ContainerRuntime
	held []string
}

func (f *holdRuntime) HoldLazyCredentials(_ context.Context, ref string, _ runtime.Credentials) {
	f.held = append(f.held, ref)
}

// An adopted pod's image volumes' images are held as its containers' are:
// a lazily pulled one's files are fetched as the volume is read.
func TestHoldLazyCredentialsImageVolumes(t *testing.T) {
	fake := &holdRuntime{}
	r := &Runtime{rt: fake}
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "i", Image: "reg.io/init:1"}},
		Containers:     []v1.Container{{Name: "c", Image: "reg.io/app:1"}},
		Volumes: []v1.Volume{
			{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "reg.io/vol:1"}}},
			{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
	}}
	r.holdLazyCredentials(context.Background(), pod)
	if want := []string{"reg.io/init:1", "reg.io/app:1", "reg.io/vol:1"}; strings.Join(fake.held, " ") != strings.Join(want, " ") {
		t.Errorf("held %q, want %q", fake.held, want)
	}
}
