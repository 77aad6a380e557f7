package hosttest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const iscsiTarget = "iqn.2003-01.io.hostlet:hosttest"

// iscsi serves two LUNs of a real target (tgt in the VM, on its loopback,
// session CHAP on) as the kubelet's iSCSI plugin: a filesystem PV two pods
// share (formatted on first use, one mount at the kubelet's global path,
// each pod's bind of it) and a block PV a pod reads and writes through
// volumeDevices; with every pod gone, the LUN is unmounted and the target
// logged out; a later pod finds the data (no second format).
func (h *host) iscsi(ctx context.Context) {
	t := h.t
	out, err := h.vm.run(ctx, `set -e
mkdir -p /srv/iscsi && truncate -s 64M /srv/iscsi/fs.img /srv/iscsi/block.img
systemctl enable --now tgt 2>&1
modprobe iscsi_tcp
systemctl start iscsid.socket 2>&1 || true
tgtadm --lld iscsi --op new --mode target --tid 1 -T `+iscsiTarget+`
tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b /srv/iscsi/fs.img
tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 2 -b /srv/iscsi/block.img
tgtadm --lld iscsi --op new --mode account --user hostlet --password s3cret-chap
tgtadm --lld iscsi --op bind --mode account --tid 1 --user hostlet
tgtadm --lld iscsi --op bind --mode target --tid 1 -I ALL
tgtadm --lld iscsi --op show --mode target | head -20`)
	if err != nil {
		t.Fatalf("iSCSI target in the VM: %v\n%s", err, out)
	}
	t0 := time.Now()
	cs := h.cluster.Client().CoreV1()
	if _, err := cs.Secrets(h.ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "chap"}, Type: "kubernetes.io/iscsi-chap",
		StringData: map[string]string{"node.session.auth.username": "hostlet", "node.session.auth.password": "s3cret-chap"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	block := v1.PersistentVolumeBlock
	for _, pv := range []struct {
		name string
		lun  int32
		mode *v1.PersistentVolumeMode
	}{{"fs", 1, nil}, {"block", 2, &block}} {
		name := h.ns + "-iscsi-" + pv.name
		obj := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{ISCSI: &v1.ISCSIPersistentVolumeSource{
				TargetPortal: "127.0.0.1", IQN: iscsiTarget, Lun: pv.lun, FSType: "ext4",
				SessionCHAPAuth: true, SecretRef: &v1.SecretReference{Name: "chap", Namespace: h.ns}}},
			VolumeMode:  pv.mode,
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("64Mi")},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		}}
		if _, err := cs.PersistentVolumes().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		class := ""
		if _, err := cs.PersistentVolumeClaims(h.ns).Create(ctx, &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "iscsi-" + pv.name},
			Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: name, AccessModes: obj.Spec.AccessModes, VolumeMode: pv.mode,
				Resources: v1.VolumeResourceRequirements{Requests: obj.Spec.Capacity}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fsPod := func(name, script string) *v1.Pod {
		p := h.pod(name, 0, nil, "sh", "-c", script)
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "iscsi-fs"}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	writer := fsPod("iscsi-writer", "echo from-writer > /data/w; exec sleep 3606")
	reader := fsPod("iscsi-reader", "until [ -f /data/w ]; do sleep 1; done; cat /data/w; exec sleep 3607")
	blk := h.pod("iscsi-block", 0, nil, "sh", "-c", "echo block-data | dd of=/dev/lun conv=notrunc,fsync 2>/dev/null; dd if=/dev/lun bs=10 count=1 2>/dev/null; echo; exec sleep 3608")
	blk.Spec.Volumes = []v1.Volume{{Name: "lun", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "iscsi-block"}}}}
	blk.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "lun", DevicePath: "/dev/lun"}}
	names := []string{"iscsi-writer", "iscsi-reader", "iscsi-block"}
	for _, p := range []*v1.Pod{writer, reader, blk} {
		h.cluster.CreatePod(t, p)
	}
	for _, name := range names {
		if _, err := h.cluster.WaitForPod(ctx, h.ns, name, 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
			t.Fatalf("pod %s with an iSCSI PV: %v", name, err)
		}
	}
	h.tm.add("%s: three pods on two iSCSI LUNs (CHAP; a filesystem shared, a block device) Running %v after their creation", h.name, time.Since(t0).Round(100*time.Millisecond))
	h.logsAre(ctx, map[string]string{"iscsi-reader": "from-writer", "iscsi-block": "block-data"})
	state := h.vm.Run(ctx, `iscsiadm -m session 2>&1 || true; findmnt -rn -o TARGET,SOURCE | grep -E 'iscsi' || true; ls /var/lib/kubelet/plugins/kubernetes.io/iscsi/volumeDevices/*/* 2>&1 || true`)
	t.Logf("iSCSI on the node:\n%s", state)
	global := "/plugins/kubernetes.io/iscsi/iface-default/127.0.0.1:3260-" + iscsiTarget + "-lun-1"
	if !strings.Contains(state, iscsiTarget) || !strings.Contains(state, global) || strings.Count(state, "/volumes/kubernetes.io~iscsi/") < 2 {
		t.Errorf("want a session with %s, the LUN mounted at %s and bound into two pods' volumes:\n%s", iscsiTarget, global, state)
	}
	h.deletePodsGone(ctx, "iscsi-writer")
	if s := h.vm.Run(ctx, `iscsiadm -m session 2>&1 || true`); !strings.Contains(s, iscsiTarget) {
		t.Errorf("logged out while pods still use the target: %s", s)
	}
	h.deletePodsGone(ctx, "iscsi-reader", "iscsi-block")
	if err := poll(ctx, time.Minute, func() error {
		if s := strings.TrimSpace(h.vm.Run(ctx, `iscsiadm -m session 2>&1 | grep -v 'No active sessions' || true; findmnt -rn -o TARGET | grep iscsi || true`)); s != "" {
			return fmt.Errorf("sessions or mounts left after the pods' deletion:\n%s", s)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// A new pod logs in again and finds the file: the LUN is formatted
	// only once.
	again := fsPod("iscsi-again", "cat /data/w; exec sleep 3609")
	h.cluster.CreatePod(t, again)
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "iscsi-again", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatalf("pod iscsi-again: %v", err)
	}
	h.logsAre(ctx, map[string]string{"iscsi-again": "from-writer"})
	h.deletePodsGone(ctx, "iscsi-again")
}

// logsAre waits up to a minute for each pod's logs to be what it wants.
func (h *host) logsAre(ctx context.Context, want map[string]string) {
	for name, w := range want {
		if err := poll(ctx, time.Minute, func() error {
			logs, err := h.cluster.Kubectl(ctx, "logs", "-n", h.ns, name)
			if err == nil && strings.TrimSpace(logs) != w {
				err = fmt.Errorf("pod %s logged %q, want %q", name, logs, w)
			}
			return err
		}); err != nil {
			h.t.Error(err)
		}
	}
}

// deletePodsGone deletes the pods and waits until the API has none of them.
func (h *host) deletePodsGone(ctx context.Context, names ...string) {
	t := h.t
	cs := h.cluster.Client().CoreV1()
	for _, name := range names {
		if err := cs.Pods(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if err := poll(ctx, 2*time.Minute, func() error {
			_, err := cs.Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("pod %s still there: %v", name, err)
		}); err != nil {
			t.Fatal(err)
		}
	}
}
