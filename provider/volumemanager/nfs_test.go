package volumemanager

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mount "k8s.io/mount-utils"
)

// fakeNFS records the mounts the plugin asks for (this kernel has no NFS
// client; make hosttest mounts real exports).
func fakeNFS(t *testing.T) *mount.FakeMounter {
	f := mount.NewFakeMounter(nil)
	was := nfsMounter
	nfsMounter = f
	t.Cleanup(func() { nfsMounter = was })
	return f
}

// An inline nfs volume and an NFS PV are mounted as the kubelet mounts
// them: server:path (an IPv6 server in brackets) at the kubelet's
// directory, the PV's mount options joined with "ro" sorted and without
// duplicates, once; a failed mount leaves no directory and is the PV's
// FailedMount.
func TestNFSMounts(t *testing.T) {
	f := fakeNFS(t)
	m := New(Config{RootDir: t.TempDir()})
	ctx := context.Background()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "fd00::1", Path: "/exports/a", ReadOnly: true}}}}}}
	vol := &pod.Spec.Volumes[0]
	mustOK(t, m.SetUpPod(ctx, pod, nil))
	mustOK(t, m.SetUpPod(ctx, pod, nil))
	dir := m.layout.PodVolumeDir("u1", "kubernetes.io/nfs", "share")
	if host, ro, err := m.MountSource(pod, vol); err != nil || host != dir || !ro {
		t.Errorf("inline mount source %s %v %v, want %s read-only", host, ro, err, dir)
	}
	want := []mount.MountPoint{{Device: "[fd00::1]:/exports/a", Path: dir, Type: "nfs", Opts: []string{"ro"}}}
	if !reflect.DeepEqual(f.MountPoints, want) {
		t.Errorf("mounts %+v, want %+v", f.MountPoints, want)
	}

	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-n", Annotations: map[string]string{}},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "10.0.0.5", Path: "/srv"}},
			MountOptions: []string{"nfsvers=4.1", "ro", "hard"}}}
	s := &Spec{Volume: &v1.Volume{Name: "data"}, Claim: &volumes.Claim{PV: pv, ReadOnly: true}}
	p := findPlugin(s)
	if p == nil || p.Name() != "kubernetes.io/nfs" {
		t.Fatalf("plugin of an NFS PV: %v", p)
	}
	mustOK(t, p.SetUp(ctx, m, pod, s, nil))
	pvDir := m.layout.PodVolumeDir("u1", "kubernetes.io/nfs", "pv-n")
	if got := f.MountPoints[1]; got.Device != "10.0.0.5:/srv" || got.Path != pvDir || !reflect.DeepEqual(got.Opts, []string{"hard", "nfsvers=4.1", "ro"}) {
		t.Errorf("PV mount %+v", got)
	}

	// The PV's annotation wins over its mountOptions, as the kubelet's.
	pv.Name, pv.Annotations[v1.MountOptionAnnotation] = "pv-a", "vers=3,nolock"
	mustOK(t, p.SetUp(ctx, m, pod, s, nil))
	if got := f.MountPoints[2].Opts; !reflect.DeepEqual(got, []string{"nolock", "ro", "vers=3"}) {
		t.Errorf("annotated PV's options %v", got)
	}

	f.MountCheckErrors = nil
	pv.Name = "pv-fail"
	failing := &failingMounter{FakeMounter: f, err: errors.New("mount failed: exit status 32")}
	nfsMounter = failing
	err := p.SetUp(ctx, m, pod, s, nil)
	var lf *lifecycle.Failure
	if !errors.As(err, &lf) || lf.Reason != "FailedMount" || lf.Message != `MountVolume.SetUp failed for volume "pv-fail" : mount failed: exit status 32` {
		t.Errorf("failed mount: %v", err)
	}
	if _, err := os.Stat(m.layout.PodVolumeDir("u1", "kubernetes.io/nfs", "pv-fail")); !os.IsNotExist(err) {
		t.Errorf("a failed mount left its directory: %v", err)
	}
}

type failingMounter struct {
	*mount.FakeMounter
	err error
}

func (f *failingMounter) MountSensitiveWithoutSystemd(string, string, string, []string, []string) error {
	return f.err
}
