package csi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hostlet/hostlet/provider/grpcsock"
	"github.com/hostlet/hostlet/provider/pluginwatcher"
	"github.com/hostlet/hostlet/provider/volumes"
	"google.golang.org/grpc"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestPaths(t *testing.T) {
	l := volumes.NewLayout("/var/lib/kubelet")
	if got := TargetPath(l, "uid1", "pv1"); got != "/var/lib/kubelet/pods/uid1/volumes/kubernetes.io~csi/pv1/mount" {
		t.Errorf("TargetPath %s", got)
	}
	staging := StagingPath(l, "d.example.com", "h1")
	if !regexp.MustCompile(`^/var/lib/kubelet/plugins/kubernetes.io/csi/d\.example\.com/[0-9a-f]{64}/globalmount$`).MatchString(staging) {
		t.Errorf("StagingPath %s", staging)
	}
	if StagingPath(l, "d.example.com", "h2") == staging {
		t.Error("two handles share a staging path")
	}
	// The attach/detach controller's name for the same volume on the node:
	// sha256 of handle, driver and node, concatenated.
	if a := AttachmentName("h1", "d", "n"); a != AttachmentName("h1d", "", "n") || !regexp.MustCompile(`^csi-[0-9a-f]{64}$`).MatchString(a) {
		t.Errorf("AttachmentName %s", a)
	}
	if InlineHandle("uid1", "a") == InlineHandle("uid2", "a") || !strings.HasPrefix(InlineHandle("u", "a"), "csi-") {
		t.Error("inline handles are not per pod")
	}
	if got := UniqueName("d", "h"); got != "kubernetes.io/csi/d^h" {
		t.Errorf("UniqueName %s", got)
	}
	// Block volumes: csiBlockMapper's paths, by the PV's name, under the
	// plugin's unescaped directory; the pod's link under its escaped one.
	for got, want := range map[string]string{
		BlockDataDir(l, "pv1"):             "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv1/data",
		BlockGlobalMapPath(l, "pv1"):       "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv1/dev",
		BlockStagingPath(l, "pv1"):         "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv1",
		BlockPublishPath(l, "pv1", "uid1"): "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv1/uid1",
		BlockLink(l, "uid1", "pv1"):        "/var/lib/kubelet/pods/uid1/volumeDevices/kubernetes.io~csi/pv1",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

func TestVolData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pv1")
	want := volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d", NodeName: "n", AttachmentID: "csi-x", VolumeLifecycleMode: lifecyclePers}
	if err := writeVolData(dir, want); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "vol_data.json"))
	var keys map[string]string
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	// The kubelet's keys, which a kubelet taking over the node reads.
	for _, k := range []string{"specVolID", "volumeHandle", "driverName", "nodeName", "attachmentID", "volumeLifecycleMode"} {
		if keys[k] == "" {
			t.Errorf("vol_data.json has no %s: %s", k, b)
		}
	}
	if got, err := readVolData(dir); err != nil || got != want {
		t.Errorf("read back %+v %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vol_data.json"), []byte(`{"specVolID":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readVolData(dir); err == nil {
		t.Error("vol_data.json without driver or handle accepted")
	}
}

func TestDecisions(t *testing.T) {
	if supportedVersion([]string{"0.3.0"}) == nil || supportedVersion(nil) == nil {
		t.Error("a plugin without a 1.x version accepted")
	}
	if supportedVersion([]string{"0.3.0", "1.0.0"}) != nil || supportedVersion([]string{"v1.5.0"}) != nil {
		t.Error("a 1.x plugin refused")
	}
	no, yes := false, true
	if !attachRequired(nil) || !attachRequired(&storagev1.CSIDriver{}) || attachRequired(&storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}) {
		t.Error("attachRequired")
	}
	if podInfoOnMount(nil) || !podInfoOnMount(&storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{PodInfoOnMount: &yes}}) {
		t.Error("podInfoOnMount")
	}
	if err := lifecycleModeAllowed("d", nil, storagev1.VolumeLifecycleEphemeral); err == nil ||
		err.Error() != `volume mode "Ephemeral" not supported by driver d (no CSIDriver object)` || lifecycleModeAllowed("d", nil, storagev1.VolumeLifecyclePersistent) != nil {
		t.Errorf("a driver without a CSIDriver is Persistent only: %v", err)
	}
	if lifecycleModeAllowed("d", &storagev1.CSIDriver{}, storagev1.VolumeLifecycleEphemeral) == nil {
		t.Error("a CSIDriver without modes allows Ephemeral")
	}
	eph := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}}}
	if err := lifecycleModeAllowed("d", eph, storagev1.VolumeLifecyclePersistent); lifecycleModeAllowed("d", eph, storagev1.VolumeLifecycleEphemeral) != nil ||
		err == nil || err.Error() != `volume mode "Persistent" not supported by driver d (only supports ["Ephemeral"])` {
		t.Errorf("an Ephemeral-only driver: %v", err)
	}
	for _, c := range []struct {
		m     v1.PersistentVolumeAccessMode
		multi bool
		want  csipb.VolumeCapability_AccessMode_Mode
	}{
		{v1.ReadWriteOnce, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOnce, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{v1.ReadOnlyMany, false, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{v1.ReadWriteMany, false, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{v1.ReadWriteOncePod, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOncePod, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
	} {
		if got := accessMode(c.m, c.multi); got != c.want {
			t.Errorf("accessMode(%s, %v) = %s, want %s", c.m, c.multi, got, c.want)
		}
	}
	file, none := storagev1.FileFSGroupPolicy, storagev1.NoneFSGroupPolicy
	rwo := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}}}
	rox := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany}}}
	for i, c := range []struct {
		policy   *storagev1.FSGroupPolicy
		fsType   string
		pv       *v1.PersistentVolume
		readOnly bool
		want     bool
	}{
		{nil, "ext4", rwo, false, true},
		{nil, "", rwo, false, false},                        // no fsType: the driver's business
		{nil, "ext4", rox, false, false},                    // not ReadWriteOnce
		{nil, "ext4", &v1.PersistentVolume{}, false, false}, // no access modes
		{nil, "ext4", nil, false, true},                     // inline counts as ReadWriteOnce
		{nil, "ext4", rwo, true, false},                     // read-only
		{&file, "", rox, false, true},
		{&file, "", rox, true, false},
		{&none, "ext4", rwo, false, false},
	} {
		if got := fsGroupApplies(c.policy, c.fsType, c.pv, c.readOnly); got != c.want {
			t.Errorf("case %d: fsGroupApplies = %v, want %v", i, got, c.want)
		}
	}
}

// fakeNode answers NodeGetInfo.
type fakeNode struct {
	csipb.UnimplementedNodeServer
}

func (fakeNode) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "id-1", MaxVolumesPerNode: 3,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "z1", "rack": "r1"}}}, nil
}

// A registered driver's NodeGetInfo is the node's CSINode entry (made,
// owned by the Node), annotation and topology labels; deregistered, the
// entry and annotation go.
func TestRegistration(t *testing.T) {
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid",
		Annotations: map[string]string{nodeIDKey: `{"other.example.com":"x"}`}}})
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client})
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, fakeNode{}) }); err != nil {
		t.Fatal(err)
	}
	p := pluginwatcher.Plugin{Type: "CSIPlugin", Name: "d.example.com", Endpoint: socket, Versions: []string{"1.0.0"}, Socket: "/reg/d.sock"}
	if err := m.Register(t.Context(), pluginwatcher.Plugin{Name: "old", Endpoint: socket, Versions: []string{"0.3.0"}}); err == nil {
		t.Error("a 0.x plugin registered")
	}
	if err := m.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	cn, err := client.StorageV1().CSINodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("CSINode owners %+v", cn.OwnerReferences)
	}
	if got, want := cn.Annotations[v1.MigratedPluginsAnnotationKey], migratedAnnotation; got != want {
		t.Errorf("migrated plugins %q, want %q", got, want)
	}
	if len(cn.Spec.Drivers) != 1 {
		t.Fatalf("CSINode drivers %+v", cn.Spec.Drivers)
	}
	d := cn.Spec.Drivers[0]
	if d.Name != "d.example.com" || d.NodeID != "id-1" || !slices.Equal(d.TopologyKeys, []string{"rack", "zone"}) || *d.Allocatable.Count != 3 {
		t.Errorf("CSINode entry %+v", d)
	}
	node, _ := client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	ids, _ := nodeIDs(node)
	if ids["d.example.com"] != "id-1" || ids["other.example.com"] != "x" {
		t.Errorf("annotation %q", node.Annotations[nodeIDKey])
	}
	if node.Labels["zone"] != "z1" || node.Labels["rack"] != "r1" {
		t.Errorf("labels %v", node.Labels)
	}
	m.Deregister(p)
	cn, _ = client.StorageV1().CSINodes().Get(t.Context(), "n1", metav1.GetOptions{})
	node, _ = client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	ids, _ = nodeIDs(node)
	if len(cn.Spec.Drivers) != 0 || ids["d.example.com"] != "" || ids["other.example.com"] != "x" {
		t.Errorf("after deregistration: CSINode %+v, annotation %q", cn.Spec.Drivers, node.Annotations[nodeIDKey])
	}
	if _, err := m.conn("d.example.com"); err == nil {
		t.Error("a deregistered driver is still used")
	}
}

// migratedAnnotation is the kubelet v1.35's list of migrated plugins.
const migratedAnnotation = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder," +
	"kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"

// A CSINode made by an older node (no migrated plugins, or some) gets the
// node's list at start, keeping its drivers; the same set in another order
// is left alone.
func TestMigratedPluginsAnnotation(t *testing.T) {
	for _, had := range []string{"", "kubernetes.io/gce-pd", "kubernetes.io/gce-pd,kubernetes.io/aws-ebs"} {
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "d", NodeID: "x"}}}}
		if had != "" {
			cn.Annotations = map[string]string{v1.MigratedPluginsAnnotationKey: had}
		}
		client := fake.NewClientset(cn)
		m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client})
		m.initCSINode(t.Context())
		got, err := client.StorageV1().CSINodes().Get(t.Context(), "n1", metav1.GetOptions{})
		if err != nil || got.Annotations[v1.MigratedPluginsAnnotationKey] != migratedAnnotation || len(got.Spec.Drivers) != 1 {
			t.Errorf("had %q: %+v %v", had, got, err)
		}
	}
	shuffled := strings.Split(migratedAnnotation, ",")
	slices.Reverse(shuffled)
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.MigratedPluginsAnnotationKey: strings.Join(shuffled, ",")}}}
	if withMigratedPlugins(cn) {
		t.Error("the same set in another order changed")
	}
}

// An attachable volume (no CSIDriver object) waits for its
// VolumeAttachment, with the kubelet's messages, and is in use from then;
// attached, it needs its driver registered.
func TestSetUpWaitsForAttach(t *testing.T) {
	client := fake.NewClientset()
	changed := 0
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client, Changed: func() { changed++ }})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	op := func() (string, string) {
		_, _, err := m.SetUpPV(t.Context(), pod, "data", "data", pv, false)
		var f *Failure
		if !errors.As(err, &f) {
			t.Fatalf("SetUpPV: %v", err)
		}
		return f.Op, f.Err.Error()
	}
	va := AttachmentName("h", "d", "n1")
	if o, msg := op(); o != "MountVolume.WaitForAttach" || !strings.HasPrefix(msg, "volume h has GET error for volume attachment "+va) {
		t.Errorf("no VolumeAttachment: %s %s", o, msg)
	}
	if got := m.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/d^h"}) || changed != 1 {
		t.Errorf("in use %v (changed %d)", got, changed)
	}
	obj := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: va}}
	if _, err := client.StorageV1().VolumeAttachments().Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if o, msg := op(); o != "MountVolume.WaitForAttach" || msg != "volume h is not attached for volume attachment "+va {
		t.Errorf("not attached: %s %s", o, msg)
	}
	obj.Status.Attached = true
	if _, err := client.StorageV1().VolumeAttachments().Update(t.Context(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if o, msg := op(); o != "MountVolume.MountDevice" || msg != "kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name d not found in the list of registered CSI drivers" {
		t.Errorf("attached, driver missing: %s %s", o, msg)
	}
	// Torn down (nothing was published), it is no longer in use.
	if err := m.TearDownPod(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if got := m.VolumesInUse(); len(got) != 0 || changed != 2 {
		t.Errorf("in use after teardown %v (changed %d)", got, changed)
	}
}

// A published volume whose driver is not registered is not torn down
// (its directory stays) until the driver registers; one never published
// is removed.
func TestTearDownNeedsDriver(t *testing.T) {
	root := t.TempDir()
	m := New(Config{RootDir: root, NodeName: "n1"})
	l := volumes.NewLayout(root)
	uid := types.UID("uid1")
	published := VolumeDir(l, uid, "pv1")
	if err := writeVolData(published, volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d"}); err != nil {
		t.Fatal(err)
	}
	failed := VolumeDir(l, uid, "pv2")
	if err := os.MkdirAll(failed, 0o750); err != nil {
		t.Fatal(err)
	}
	err := m.TearDownPod(t.Context(), uid)
	if err == nil || !strings.Contains(err.Error(), "driver name d not found in the list of registered CSI drivers") {
		t.Errorf("TearDownPod: %v", err)
	}
	if _, err := os.Stat(filepath.Join(published, "vol_data.json")); err != nil {
		t.Errorf("the published volume's data went: %v", err)
	}
	if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("the volume never published stays: %v", err)
	}
	// The driver registers: the volume is unpublished then, not at the
	// next cleanup.
	rec := infoRecorder{recorder{calls: make(chan string, 10)}}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, rec) }); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(t.Context(), pluginwatcher.Plugin{Name: "d", Endpoint: socket, Versions: []string{"1.0.0"}}); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.calls; got != "unpublish "+TargetPath(l, uid, "pv1") {
		t.Errorf("after registration: %s", got)
	}
}

// infoRecorder is a recorder that answers NodeGetInfo too.
type infoRecorder struct{ recorder }

func (infoRecorder) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "id"}, nil
}

// recorder answers NodeUnpublish and NodeUnstage, recording them.
type recorder struct {
	csipb.UnimplementedNodeServer
	calls chan string
}

func (r recorder) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	r.calls <- "unpublish " + req.TargetPath
	if err := os.Remove(req.TargetPath); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (r recorder) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	r.calls <- "unstage " + req.StagingTargetPath
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// A staged volume two pods use is unstaged with the last one only, and
// each pod's directory goes once it is unpublished; an inline volume is
// never unstaged.
func TestTearDownUnstagesLastUse(t *testing.T) {
	root := t.TempDir()
	m := New(Config{RootDir: root, NodeName: "n1"})
	l := volumes.NewLayout(root)
	rec := recorder{calls: make(chan string, 10)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, rec) }); err != nil {
		t.Fatal(err)
	}
	m.drivers["d"] = driver{endpoint: socket}
	staging := StagingPath(l, "d", "h")
	if err := writeVolData(filepath.Dir(staging), volData{DriverName: "d", VolumeHandle: "h"}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{"a", "b"} {
		if err := writeVolData(VolumeDir(l, uid, "pv1"), volData{SpecVolID: "pv1", VolumeHandle: "h", DriverName: "d", VolumeLifecycleMode: lifecyclePers}); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(TargetPath(l, uid, "pv1"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeVolData(VolumeDir(l, "b", "eph"), volData{SpecVolID: "eph", VolumeHandle: "csi-x", DriverName: "d", VolumeLifecycleMode: lifecycleEph}); err != nil {
		t.Fatal(err)
	}
	drain := func() []string {
		var out []string
		for {
			select {
			case c := <-rec.calls:
				out = append(out, c)
			default:
				slices.Sort(out)
				return out
			}
		}
	}
	if err := m.TearDownPod(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := drain(); !slices.Equal(got, []string{"unpublish " + TargetPath(l, "a", "pv1")}) {
		t.Errorf("first pod: %v", got)
	}
	if _, err := os.Stat(filepath.Join(l.PodVolumesDir("a"), "kubernetes.io~csi")); !os.IsNotExist(err) {
		t.Errorf("the first pod's csi volumes stay: %v", err)
	}
	if err := m.TearDownPod(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	want := []string{"unpublish " + TargetPath(l, "b", "eph"), "unpublish " + TargetPath(l, "b", "pv1"), "unstage " + staging}
	if got := drain(); !slices.Equal(got, want) {
		t.Errorf("last pod: %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Dir(staging)); !os.IsNotExist(err) {
		t.Errorf("the staging dir stays: %v", err)
	}
}

// publisher answers NodeGetCapabilities (none) and NodePublishVolume,
// sending each publish's volume context.
type publisher struct {
	csipb.UnimplementedNodeServer
	published chan map[string]string
}

func (publisher) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{}, nil
}

func (p publisher) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	p.published <- req.VolumeContext
	return &csipb.NodePublishVolumeResponse{}, nil
}

// A driver with tokenRequests gets the pod's token for its audience in
// the volume context, bound to the pod; with requiresRepublish a volume
// published already is published again (the same token, cached), without
// it not.
func TestTokensAndRepublish(t *testing.T) {
	client := fake.NewClientset()
	var requests []*authv1.TokenRequest
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenRequest)
		requests = append(requests, tr)
		tr = tr.DeepCopy()
		tr.Status = authv1.TokenRequestStatus{Token: "tok", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}
		return true, tr, nil
	})
	m := New(Config{RootDir: t.TempDir(), NodeName: "n1", Client: client})
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	yes := true
	cd := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
		TokenRequests:        []storagev1.TokenRequest{{Audience: "aud"}}, RequiresRepublish: &yes}}
	if err := idx.Add(cd); err != nil {
		t.Fatal(err)
	}
	m.csiDrivers = storagelisters.NewCSIDriverLister(idx)
	pub := publisher{published: make(chan map[string]string, 4)}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := grpcsock.Serve(t.Context(), socket, "fake", func(s *grpc.Server) { csipb.RegisterNodeServer(s, pub) }); err != nil {
		t.Fatal(err)
	}
	m.drivers["d"] = driver{endpoint: socket}
	mounted := false
	m.mounted = func(string) (bool, error) { return mounted, nil }
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid1"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}}
	vol := &v1.Volume{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}}
	for i := range 2 {
		if _, _, err := m.SetUpInline(t.Context(), pod, vol); err != nil {
			t.Fatal(err)
		}
		var tokens map[string]authv1.TokenRequestStatus
		if err := json.Unmarshal([]byte((<-pub.published)[tokensKey]), &tokens); err != nil || tokens["aud"].Token != "tok" {
			t.Errorf("publish %d: tokens %v %v", i, tokens, err)
		}
		mounted = true
	}
	if len(requests) != 1 || requests[0].Spec.BoundObjectRef.UID != "uid1" || !slices.Equal(requests[0].Spec.Audiences, []string{"aud"}) {
		t.Errorf("token requests %+v", requests)
	}
	cd = cd.DeepCopy()
	cd.Spec.RequiresRepublish = nil
	if err := idx.Update(cd); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.SetUpInline(t.Context(), pod, vol); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-pub.published:
		t.Errorf("published again without requiresRepublish: %v", c)
	default:
	}
}

// A cached token is renewed once 80% of its lifetime is gone.
func TestTokenCacheRenewal(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := &tokenCache{clock: fc}
	c.put("uid/sa/aud/0s", authv1.TokenRequestStatus{Token: "t", ExpirationTimestamp: metav1.NewTime(fc.Now().Add(100 * time.Second))})
	fc.Step(79 * time.Second)
	if st, ok := c.get("uid/sa/aud/0s"); !ok || st.Token != "t" {
		t.Error("a fresh token is not reused")
	}
	fc.Step(2 * time.Second)
	if _, ok := c.get("uid/sa/aud/0s"); ok {
		t.Error("a token past 80% of its lifetime is reused")
	}
	c.forget("uid/")
	if len(c.byKey) != 0 {
		t.Errorf("forgotten pod's tokens stay: %v", c.byKey)
	}
}

func TestUsageStats(t *testing.T) {
	st, err := usageStats([]*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: 100, Available: 60, Used: 40},
		{Unit: csipb.VolumeUsage_INODES, Total: 10, Available: 7, Used: 3},
	})
	if err != nil || st != (VolumeStats{CapacityBytes: 100, AvailableBytes: 60, UsedBytes: 40, Inodes: 10, InodesFree: 7, InodesUsed: 3}) {
		t.Errorf("usage %+v %v", st, err)
	}
	if _, err := usageStats(nil); err == nil {
		t.Error("no usage accepted")
	}
	if _, err := usageStats([]*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: -1}}); err == nil {
		t.Error("a negative usage accepted")
	}
}
