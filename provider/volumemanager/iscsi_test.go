package volumemanager

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/volumes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingexec "k8s.io/utils/exec/testing"
)

const testIQN = "iqn.2003-01.io.k8s:e2e.volume-1"

// fakeISCSI is a host whose iscsiadm logs in by making the session's
// sysfs entries and the LUN's by-path link, as open-iscsi and udev would.
type fakeISCSI struct {
	t     *testing.T
	root  string
	calls []string
	fail  map[string]int // a call's prefix → its exit status
}

func newFakeISCSI(t *testing.T) *fakeISCSI {
	f := &fakeISCSI{t: t, root: t.TempDir(), fail: map[string]int{}}
	old := hostISCSI
	hostISCSI = &iscsiHost{run: f.run, sys: filepath.Join(f.root, "sys"), dev: f.root, sleep: func(time.Duration) {}}
	t.Cleanup(func() { hostISCSI = old })
	return f
}

func (f *fakeISCSI) write(path, data string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeISCSI) run(name string, args ...string) (string, error) {
	call := name + " " + strings.Join(args, " ")
	f.calls = append(f.calls, call)
	for prefix, status := range f.fail {
		if strings.HasPrefix(call, prefix) {
			return "iscsiadm: failed", testingexec.FakeExitError{Status: status}
		}
	}
	switch {
	case strings.Contains(call, "-m iface") && strings.HasSuffix(call, "-o show"):
		return "# BEGIN RECORD\niface.iscsi_ifacename = default\niface.transport_name = tcp\niface.initiatorname = <empty>\n# END RECORD\n", nil
	case strings.HasSuffix(call, "--login"):
		portal := args[3]
		lun := "0"
		sess := filepath.Join(hostISCSI.sys, "class", "iscsi_host", "host3", "device", "session1")
		f.write(filepath.Join(sess, "iscsi_session", "session1", "targetname"), testIQN+"\n")
		conn := filepath.Join(sess, "connection1:0", "iscsi_connection", "connection1:0")
		addr, port, _ := strings.Cut(portal, ":")
		for file, v := range map[string]string{"address": addr, "port": port, "persistent_address": addr, "persistent_port": port} {
			f.write(filepath.Join(conn, file), v+"\n")
		}
		f.write(filepath.Join(hostISCSI.sys, "class", "scsi_host", "host3", "scan"), "")
		// udev's link to the LUN's disk, and the disk in the session.
		f.write(filepath.Join(f.root, "dev", "sdb"), "")
		link := filepath.Join(f.root, "dev", "disk", "by-path", "ip-"+portal+"-iscsi-"+testIQN+"-lun-"+lun)
		_ = os.MkdirAll(filepath.Dir(link), 0o755)
		_ = os.Symlink(filepath.Join(f.root, "dev", "sdb"), link)
		f.write(filepath.Join(sess, "target3:0:0", "3:0:0:0", "block", "sdb", "dev"), "8:16\n")
	}
	return "", nil
}

// has: some call starts with prefix.
func (f *fakeISCSI) has(prefix string) bool {
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

func iscsiPV(name string, src v1.ISCSIPersistentVolumeSource) *Spec {
	return &Spec{Volume: &v1.Volume{Name: "data"}, Claim: &volumes.Claim{PV: &v1.PersistentVolume{
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{ISCSI: &src}}}}}
}

func TestISCSISpec(t *testing.T) {
	name := "iqn.1994-05.com.redhat:node"
	s := iscsiPV("pv1", v1.ISCSIPersistentVolumeSource{TargetPortal: "10.0.0.1", Portals: []string{"10.0.0.2:3261"}, IQN: testIQN, Lun: 2,
		InitiatorName: &name, SessionCHAPAuth: true, SecretRef: &v1.SecretReference{Name: "chap"}})
	s.Claim.PV.Name = "pv1"
	d := iscsiSpec(s, "ns")
	want := &iscsiDisk{VolName: "pv1", Portals: []string{"10.0.0.1:3260", "10.0.0.2:3261"}, Iqn: testIQN, Lun: "2",
		InitIface: "default", Iface: "10.0.0.1:3260:pv1", InitiatorName: name, chapSession: true,
		secretRef: &v1.SecretReference{Name: "chap", Namespace: "ns"}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("disk:\n got %+v\nwant %+v", d, want)
	}
	m := New(Config{RootDir: "/var/lib/kubelet"})
	if got := m.iscsiGlobalPath(d); got != "/var/lib/kubelet/plugins/kubernetes.io/iscsi/iface-10.0.0.1:3260:pv1/10.0.0.1:3260-"+testIQN+"-lun-2" {
		t.Errorf("global path %s", got)
	}
	if got := m.iscsiGlobalMapPath(d); got != "/var/lib/kubelet/plugins/kubernetes.io/iscsi/volumeDevices/iface-10.0.0.1:3260:pv1/10.0.0.1:3260-"+testIQN+"-lun-2" {
		t.Errorf("global map path %s", got)
	}
	inline := iscsiSpec(&Spec{Volume: &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{
		TargetPortal: "[fd00::1]:3260", IQN: testIQN, ReadOnly: true, SecretRef: &v1.LocalObjectReference{Name: "s"}}}}}, "pods")
	if inline.Iface != "default" || inline.Portals[0] != "[fd00::1]:3260" || !inline.readOnly || inline.secretRef.Namespace != "pods" {
		t.Errorf("inline disk %+v", inline)
	}
}

func TestISCSIAttach(t *testing.T) {
	f := newFakeISCSI(t)
	d := &iscsiDisk{VolName: "pv1", Portals: []string{"127.0.0.1:3260"}, Iqn: testIQN, Lun: "0", InitIface: "default", Iface: "default",
		chapSession: true, secret: map[string]string{"node.session.auth.username": "user", "node.session.auth.password": "secret"}}
	dev, err := hostISCSI.attach(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(f.root, "dev", "disk", "by-path", "ip-127.0.0.1:3260-iscsi-"+testIQN+"-lun-0"); dev != want {
		t.Errorf("device %s, want %s", dev, want)
	}
	for _, want := range []string{
		"iscsiadm -m discoverydb -t sendtargets -p 127.0.0.1:3260 -I default -o new",
		"iscsiadm -m discoverydb -t sendtargets -p 127.0.0.1:3260 -I default --discover",
		"iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -I default -o update -n node.session.scan -v manual",
		"iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -I default -o update -n node.session.auth.authmethod -v CHAP",
		"iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -I default -o update -n node.session.auth.password -v secret",
		"iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -I default --login",
		"iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -o update -n node.startup -v manual",
	} {
		if !f.has(want) {
			t.Errorf("no %q in\n%s", want, strings.Join(f.calls, "\n"))
		}
	}
	if f.has("iscsiadm -m discoverydb -t sendtargets -p 127.0.0.1:3260 -I default -o update -n discovery") {
		t.Error("discovery CHAP set without discoveryCHAPAuth")
	}
	if b, _ := os.ReadFile(filepath.Join(hostISCSI.sys, "class", "scsi_host", "host3", "scan")); string(b) != "0 0 0" {
		t.Errorf("LUN scan wrote %q", b)
	}
	// Logged in already: the LUN is scanned, nothing logs in again.
	f.calls = nil
	if _, err := hostISCSI.attach(d); err != nil {
		t.Fatal(err)
	}
	if f.has("iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " -I default --login") {
		t.Error("logged in again")
	}
	// Its disk in a multipath map: the map is the device.
	f.write(filepath.Join(hostISCSI.sys, "block", "dm-0", "slaves", "sdb"), "")
	if dev, err := hostISCSI.attach(d); err != nil || dev != filepath.Join(f.root, "dev", "dm-0") {
		t.Errorf("multipath device %s, %v", dev, err)
	}
}

func TestISCSIAttachFails(t *testing.T) {
	f := newFakeISCSI(t)
	f.fail["iscsiadm -m node -p 127.0.0.1:3260 -T "+testIQN+" -I default --login"] = 19
	d := &iscsiDisk{VolName: "v", Portals: []string{"127.0.0.1:3260"}, Iqn: testIQN, Lun: "0", InitIface: "default", Iface: "default"}
	_, err := hostISCSI.attach(d)
	if err == nil || !strings.HasPrefix(err.Error(), "failed to get any path for iscsi disk, last err seen:\niscsi: failed to attach disk: Error: iscsiadm: failed") {
		t.Errorf("error %v", err)
	}
	if !f.has("iscsiadm -m node -p 127.0.0.1:3260 -I default -T " + testIQN + " -o delete") {
		t.Error("the failed login's node record not deleted")
	}
}

func TestISCSIDetach(t *testing.T) {
	f := newFakeISCSI(t)
	m := New(Config{RootDir: t.TempDir()})
	d := &iscsiDisk{VolName: "pv1", Portals: []string{"127.0.0.1:3260"}, Iqn: testIQN, Lun: "0", InitIface: "default", Iface: "default"}
	other := *d
	other.Lun = "1"
	for _, disk := range []*iscsiDisk{d, &other} {
		if err := persistISCSI(disk, m.iscsiGlobalPath(disk)); err != nil {
			t.Fatal(err)
		}
	}
	// Another LUN of the target is here: no logout.
	if err := m.detach(m.iscsiGlobalPath(d), nil); err != nil {
		t.Fatal(err)
	}
	if f.has("iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " --logout") {
		t.Error("logged out while another LUN of the target is in use")
	}
	if _, err := os.Stat(m.iscsiGlobalPath(d)); !os.IsNotExist(err) {
		t.Errorf("global path left: %v", err)
	}
	// The last one: logged out, its record deleted (none there is no error).
	f.fail["iscsiadm -m node -p 127.0.0.1:3260 -T "+testIQN+" -o delete"] = iscsiErrNoObjsFound
	if err := m.detach(m.iscsiGlobalPath(&other), nil); err != nil {
		t.Fatal(err)
	}
	if !f.has("iscsiadm -m node -p 127.0.0.1:3260 -T " + testIQN + " --logout -I default") {
		t.Errorf("not logged out:\n%s", strings.Join(f.calls, "\n"))
	}
	// A block LUN a pod still maps is left alone.
	global := m.iscsiGlobalMapPath(d)
	if err := persistISCSI(d, global); err != nil {
		t.Fatal(err)
	}
	f.write(filepath.Join(global, "pod-uid"), "")
	f.calls = nil
	if err := m.iscsiUnmapDevice(global); err != nil || len(f.calls) > 0 {
		t.Errorf("a mapped LUN torn down: %v %v", err, f.calls)
	}
	_ = os.Remove(filepath.Join(global, "pod-uid"))
	if err := m.iscsiUnmapDevice(global); err != nil || !f.has("iscsiadm -m node -p 127.0.0.1:3260 -T "+testIQN+" --logout") {
		t.Errorf("an unmapped LUN not logged out: %v %v", err, f.calls)
	}
}

func TestISCSINames(t *testing.T) {
	portal, iqn, err := portalAndIqn("127.0.0.1:3260-" + testIQN + "-lun-3")
	if err != nil || portal != "127.0.0.1:3260" || iqn != testIQN {
		t.Errorf("%q %q %v", portal, iqn, err)
	}
	if _, _, err := portalAndIqn("nonsense"); err == nil {
		t.Error("no error for a name without a target")
	}
	if iface, ok := ifaceOf("/r/plugins/kubernetes.io/iscsi/iface-default/x-lun-0"); !ok || iface != "default" {
		t.Errorf("iface %q %v", iface, ok)
	}
	if lunOf("/r/x/127.0.0.1:3260-"+testIQN+"-lun-12") != "12" {
		t.Error("lun")
	}
	params, err := parseIfaceShow("iface.iscsi_ifacename = default\niface.transport_name = tcp\niface.hwaddress = <empty>\n")
	if err != nil || !reflect.DeepEqual(params, map[string]string{"iface.transport_name": "tcp"}) {
		t.Errorf("%v %v", params, err)
	}
}

func TestStatFSDir(t *testing.T) {
	m := New(Config{RootDir: "/r"})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	nfsVol := &v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/e"}}}
	iscsiVol := &v1.Volume{Name: "lun", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{TargetPortal: "p", IQN: testIQN}}}
	pod.Spec.Volumes = []v1.Volume{*nfsVol, *iscsiVol}
	if dir, ok := m.StatFSDir(pod, nfsVol); !ok || dir != "/r/pods/u1/volumes/kubernetes.io~nfs/share" {
		t.Errorf("nfs: %q %v", dir, ok)
	}
	if dir, ok := m.StatFSDir(pod, iscsiVol); !ok || dir != "/r/pods/u1/volumes/kubernetes.io~iscsi/lun" {
		t.Errorf("iscsi: %q %v", dir, ok)
	}
	empty := &v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	if _, ok := m.StatFSDir(pod, empty); ok {
		t.Error("an emptyDir's stats are walked, not its filesystem's")
	}
	claim := &v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}}
	if _, ok := m.StatFSDir(pod, claim); ok {
		t.Error("a claim not set up has no stats")
	}
}

// An inline volume's target, portal or iface that would make a path out of
// the plugin's directory is refused before anything is made.
func TestISCSIPathsRefused(t *testing.T) {
	for _, src := range []*v1.ISCSIVolumeSource{
		{TargetPortal: "p", IQN: "iqn.2003-01.x:../../../../tmp/bait"},
		{TargetPortal: "../../bait", IQN: testIQN},
		{TargetPortal: "p", IQN: testIQN, ISCSIInterface: "../x"},
	} {
		d := iscsiSpec(&Spec{Volume: &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ISCSI: src}}}, "ns")
		if err := d.checkPaths(); err == nil {
			t.Errorf("%+v: not refused", src)
		}
	}
	ok := iscsiSpec(&Spec{Volume: &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{TargetPortal: "[fd00::1]:3260", IQN: testIQN}}}}, "ns")
	if err := ok.checkPaths(); err != nil {
		t.Error(err)
	}
	f := newFakeISCSI(t)
	m := New(Config{RootDir: t.TempDir()})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Namespace: "ns"}}
	vol := &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{TargetPortal: "p", IQN: "iqn.2003-01.x:../../bait"}}}
	if err := (iscsi{}).SetUp(context.Background(), m, pod, &Spec{Volume: vol}, nil); err == nil || len(f.calls) > 0 {
		t.Errorf("set up: %v, iscsiadm %v", err, f.calls)
	}
}
