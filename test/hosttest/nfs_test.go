package hosttest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nfs mounts a real export (the VM's own nfs-kernel-server, on its
// loopback) as the kubelet's NFS plugin does: an inline nfs volume and an
// NFS PV with mountOptions (nfsvers=3) share it, each pod reads what the
// other wrote, the PV's mount has its options, and deleting the pods
// unmounts both.
func (h *host) nfs(ctx context.Context) {
	t := h.t
	out, err := h.vm.run(ctx, `mkdir -p /srv/nfs/share && echo from-server > /srv/nfs/share/hello && chmod 777 /srv/nfs/share &&
echo '/srv/nfs/share 127.0.0.1(rw,sync,no_subtree_check,no_root_squash)' > /etc/exports && systemctl enable --now nfs-server 2>&1 && exportfs -ra 2>&1 && exportfs -v`)
	if err != nil {
		t.Fatalf("NFS server in the VM: %v\n%s", err, out)
	}
	t0 := time.Now()
	cs := h.cluster.Client().CoreV1()
	pvName := h.ns + "-nfs"
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "127.0.0.1", Path: "/srv/nfs/share"}},
		MountOptions:           []string{"nfsvers=3", "nolock"},
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
	}}
	if _, err := cs.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{}) })
	class := ""
	if _, err := cs.PersistentVolumeClaims(h.ns).Create(ctx, &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nfs"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: pvName, AccessModes: pv.Spec.AccessModes,
			Resources: v1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inline := h.pod("nfs-inline", 0, nil, "sh", "-c", "echo from-inline > /share/inline; cat /share/hello; exec sleep 3604")
	inline.Spec.Volumes = []v1.Volume{{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "127.0.0.1", Path: "/srv/nfs/share"}}}}
	inline.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "share", MountPath: "/share"}}
	claimed := h.pod("nfs-pv", 0, nil, "sh", "-c", "until [ -f /data/inline ]; do sleep 1; done; cat /data/inline; echo from-pv > /data/pv; exec sleep 3605")
	claimed.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "nfs"}}}}
	claimed.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	h.cluster.CreatePod(t, inline)
	h.cluster.CreatePod(t, claimed)
	for _, name := range []string{"nfs-inline", "nfs-pv"} {
		if _, err := h.cluster.WaitForPod(ctx, h.ns, name, 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
			t.Fatalf("pod %s with an NFS volume: %v", name, err)
		}
	}
	if err := poll(ctx, 3*time.Minute, func() error {
		if b := strings.TrimSpace(h.vm.Run(ctx, "cat /srv/nfs/share/pv 2>&1 || true")); b != "from-pv" {
			return fmt.Errorf("the export's file the PV's pod wrote: %q", b)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	h.tm.add("%s: two pods sharing an NFS export (inline, PV) Running and writing %v after their creation", h.name, time.Since(t0).Round(100*time.Millisecond))
	h.logsAre(ctx, map[string]string{"nfs-inline": "from-server", "nfs-pv": "from-inline"})
	mounts := h.vm.Run(ctx, `findmnt -rn -t nfs,nfs4 -o TARGET,SOURCE,OPTIONS`)
	t.Logf("NFS mounts:\n%s", mounts)
	if !strings.Contains(mounts, "/volumes/kubernetes.io~nfs/share 127.0.0.1:/srv/nfs/share") ||
		!hasVers3(mounts, "/volumes/kubernetes.io~nfs/"+pvName) {
		t.Errorf("the pods' NFS mounts, want the inline one at kubernetes.io~nfs/share and the PV's at kubernetes.io~nfs/%s with vers=3:\n%s", pvName, mounts)
	}
	h.deletePodsGone(ctx, "nfs-inline", "nfs-pv")
	// A pod of grace 0 leaves the API at once: its volumes go right after.
	if err := poll(ctx, time.Minute, func() error {
		if left := strings.TrimSpace(h.vm.Run(ctx, `findmnt -rn -t nfs,nfs4 -o TARGET || true`)); left != "" {
			return fmt.Errorf("NFS mounts left after the pods' deletion: %s", left)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// hasVers3: a findmnt line at a target ending in suffix has vers=3.
func hasVers3(mounts, suffix string) bool {
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) == 3 && strings.HasSuffix(f[0], suffix) && strings.Contains(","+f[2]+",", ",vers=3,") {
			return true
		}
	}
	return false
}
