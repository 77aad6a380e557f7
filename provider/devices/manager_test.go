package devices

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const res = "example.com/resource"

func TestPick(t *testing.T) {
	free := sets.New("a", "b", "c", "d")
	for _, tc := range []struct {
		name      string
		n         int
		reuse     []string
		preferred []string
		want      []string
		ok        bool
	}{
		{"in ID order", 2, nil, nil, []string{"a", "b"}, true},
		{"preferred first", 2, nil, []string{"d", "c"}, []string{"d", "c"}, true},
		{"preferred not free is skipped", 2, nil, []string{"x", "c"}, []string{"c", "a"}, true},
		{"init container's devices first", 2, []string{"z"}, []string{"d"}, []string{"z", "d"}, true},
		{"not enough", 5, nil, nil, []string{"a", "b", "c", "d"}, false},
	} {
		got, ok := pick(tc.n, tc.reuse, free, tc.preferred)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAssignments(t *testing.T) {
	a := assignments{}
	a.set("p1", "c1", res, assignment{DeviceIDs: []string{"a", "b"}})
	a.set("p1", "c2", "other.com/x", assignment{DeviceIDs: []string{"x"}})
	a.set("p2", "c1", res, assignment{DeviceIDs: []string{"c"}})
	if got := sets.List(a.inUse(res)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("inUse = %v", got)
	}
	if got := a.count(); got[res] != 3 || got["other.com/x"] != 1 {
		t.Errorf("count = %v", got)
	}
	if !a.retain(sets.New("p2")) || a.retain(sets.New("p2")) {
		t.Error("retain should drop p1 once")
	}
	if got := sets.List(a.inUse(res)); !slices.Equal(got, []string{"c"}) {
		t.Errorf("after retain inUse = %v", got)
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), checkpointName)
	cp, err := readCheckpoint(path)
	if err != nil || len(cp.Assignments) != 0 {
		t.Fatalf("missing file: %v %v", cp, err)
	}
	cp.Assignments.set("p1", "c", res, assignment{DeviceIDs: []string{"a"}, Response: []byte{1, 2}})
	cp.Registered[res] = []string{"a", "b"}
	if err := writeCheckpoint(path, cp); err != nil {
		t.Fatal(err)
	}
	got, err := readCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := got.Assignments.get("p1", "c", res); !ok || !slices.Equal(x.DeviceIDs, []string{"a"}) || !slices.Equal(x.Response, []byte{1, 2}) {
		t.Errorf("assignment lost: %+v", got)
	}
	// Replaced in place: the assignments are the node's alone (0600) and no
	// temp file is left next to the checkpoint.
	cp.Registered[res] = []string{"a"}
	if err := writeCheckpoint(path, cp); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint mode %v, err %v; want 0600", st.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("files next to the checkpoint: %v", entries)
	}
	if got, _ := readCheckpoint(path); !slices.Equal(got.Registered[res], []string{"a"}) {
		t.Errorf("rewritten checkpoint registered = %v", got.Registered)
	}
	if err := os.WriteFile(path, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(path); err == nil {
		t.Error("a torn checkpoint should be an error")
	}
}

func devicePod(uid, container string, n int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      container,
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}},
		}}},
	}
}

func counts(t *testing.T, m *Manager) (capacity, allocatable, assigned int64) {
	t.Helper()
	c, a, s := m.Resources()
	q := func(l v1.ResourceList) int64 { v := l[res]; return v.Value() }
	return q(c), q(a), q(s)
}

// Health changes reach allocatable at once; capacity keeps every device;
// a plugin that goes away leaves its devices unhealthy.
func TestHealthChanges(t *testing.T) {
	m, err := New(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	m.changed = func() { changes++ }
	e := &endpoint{resource: res}
	m.resources[res] = &state{ep: e, devices: map[string]*pluginapi.Device{}}
	m.update(e, []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Healthy}})
	if c, a, _ := counts(t, m); c != 2 || a != 2 {
		t.Fatalf("capacity %d allocatable %d, want 2 2", c, a)
	}
	m.update(e, []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Unhealthy}})
	if c, a, _ := counts(t, m); c != 2 || a != 1 {
		t.Fatalf("after b unhealthy: capacity %d allocatable %d, want 2 1", c, a)
	}
	// An endpoint replaced by a newer registration changes nothing.
	m.update(&endpoint{resource: res}, nil)
	if c, _, _ := counts(t, m); c != 2 {
		t.Fatalf("a stale endpoint's list was taken")
	}
	m.disconnected(e)
	if c, a, _ := counts(t, m); c != 2 || a != 0 {
		t.Fatalf("after the plugin went away: capacity %d allocatable %d, want 2 0", c, a)
	}
	if changes != 3 {
		t.Errorf("node told of %d changes, want 3", changes)
	}
}

// After a restart the checkpoint keeps a pod's devices: its containers
// are re-admitted without the plugin, and no other pod gets them.
func TestCheckpointRestore(t *testing.T) {
	dir := t.TempDir()
	cp := checkpoint{Assignments: assignments{}, Registered: map[string][]string{res: {"a", "b"}}}
	cp.Assignments.set("p1", "c", res, assignment{DeviceIDs: []string{"a", "b"}})
	if err := writeCheckpoint(filepath.Join(dir, checkpointName), cp); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Dir: dir, ActivePods: func() ([]*v1.Pod, bool) { return []*v1.Pod{devicePod("p1", "c", 2)}, true }})
	if err != nil {
		t.Fatal(err)
	}
	if c, a, s := counts(t, m); c != 0 || a != 0 || s != 2 {
		t.Fatalf("restored: capacity %d allocatable %d assigned %d, want 0 0 2", c, a, s)
	}
	if err := m.Allocate(devicePod("p1", "c", 2)); err != nil {
		t.Fatalf("re-admitting the pod that holds the devices: %v", err)
	}
	err = m.Allocate(devicePod("p1", "c", 1))
	if err == nil || !strings.Contains(err.Error(), `changed request for resource "example.com/resource" from 2 to 1`) {
		t.Errorf("changed request: %v", err)
	}
	// The plugin is back with both devices, both held.
	e := &endpoint{resource: res}
	m.resources[res].ep = e
	m.update(e, []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Healthy}})
	err = m.Allocate(devicePod("p2", "c", 1))
	if err == nil || err.Error() != "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0" {
		t.Errorf("second pod: %v", err)
	}
	if got := m.Assigned("p1", "c")[res]; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Assigned = %v", got)
	}
	// p1 finished: its devices are free at the next allocation.
	m.cfg.ActivePods = func() ([]*v1.Pod, bool) { return nil, true }
	m.freeInactive(types.UID("p2"))
	if _, _, s := counts(t, m); s != 0 {
		t.Errorf("devices of a finished pod still held: %d", s)
	}
}
