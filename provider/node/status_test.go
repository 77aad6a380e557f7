package node

import (
	"context"
	"testing"
	"time"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	nodeutil "k8s.io/component-helpers/node/util"
)

func TestDesiredNodeStatus(t *testing.T) {
	t0 := metav1.Unix(1000, 0)
	t1 := metav1.Unix(2000, 0)
	now := metav1.Unix(3000, 0)
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastTransitionTime: t0, LastHeartbeatTime: t0}
	mem := v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastTransitionTime: t0, LastHeartbeatTime: t0}
	want := v1.NodeStatus{
		Conditions:  []v1.NodeCondition{mem, ready},
		Addresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: "n"}},
		Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourcePods: resource.MustParse("110")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourcePods: resource.MustParse("110")},
		NodeInfo:    v1.NodeSystemInfo{KubeletVersion: "v1.35.4"},
	}

	t.Run("in sync", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Conditions[1].LastHeartbeatTime = t1 // heartbeats do not count
		got := desiredStatus(api, want, now)
		if d := statusDiff(api, got); len(d) != 0 {
			t.Fatalf("differs in %v", d)
		}
	})

	t.Run("volumes in use", func(t *testing.T) {
		api := *want.DeepCopy()
		w := *want.DeepCopy()
		w.VolumesInUse = []v1.UniqueVolumeName{"kubernetes.io/csi/d^h"}
		got := desiredStatus(api, w, now)
		if d := statusDiff(api, got); len(d) != 1 || d[0] != "volumesInUse" {
			t.Fatalf("diff %v, want volumesInUse", d)
		}
		if len(got.VolumesInUse) != 1 || got.VolumesInUse[0] != "kubernetes.io/csi/d^h" {
			t.Errorf("volumesInUse %v", got.VolumesInUse)
		}
	})

	t.Run("marked unknown by the node lifecycle controller", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Conditions[0] = v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastTransitionTime: t1}
		api.Conditions[1] = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastTransitionTime: t1}
		got := desiredStatus(api, want, now)
		if d := statusDiff(api, got); len(d) != 1 || d[0] != "conditions" {
			t.Fatalf("diff %v, want conditions", d)
		}
		_, r := nodeutil.GetNodeCondition(&got, v1.NodeReady)
		if r.Status != v1.ConditionTrue || r.Reason != "KubeletReady" || !r.LastTransitionTime.Equal(&now) || !r.LastHeartbeatTime.Equal(&now) {
			t.Fatalf("ready %+v: want True, transitioned now", r)
		}
	})

	t.Run("same status keeps the API's transition time", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Conditions[1].LastTransitionTime = t1
		api.Conditions[1].Message = "edited"
		got := desiredStatus(api, want, now)
		r := got.Conditions[1]
		if r.Message != ready.Message || !r.LastTransitionTime.Equal(&t1) {
			t.Fatalf("ready %+v: want own message, API transition time", r)
		}
	})

	t.Run("others' conditions and resources are kept", func(t *testing.T) {
		api := *want.DeepCopy()
		net := v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: "RouteCreated"}
		api.Conditions = append(api.Conditions, net)
		api.Capacity["example.com/dongle"] = resource.MustParse("4")
		got := desiredStatus(api, want, now)
		if _, c := nodeutil.GetNodeCondition(&got, v1.NodeNetworkUnavailable); c == nil {
			t.Error("NetworkUnavailable dropped")
		}
		if q := got.Allocatable["example.com/dongle"]; q.Value() != 4 {
			t.Errorf("extended resource allocatable %v, want 4 (its capacity)", q.String())
		}
		if d := statusDiff(api, got); len(d) != 1 || d[0] != "allocatable" {
			t.Errorf("diff %v, want allocatable only", d)
		}
	})

	t.Run("images are the node's", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Images = []v1.ContainerImage{{Names: []string{"edited"}}}
		w := *want.DeepCopy()
		w.Images = []v1.ContainerImage{{Names: []string{"mine"}, SizeBytes: 1}}
		got := desiredStatus(api, w, now)
		if len(got.Images) != 1 || got.Images[0].Names[0] != "mine" {
			t.Errorf("images %v", got.Images)
		}
		if d := statusDiff(api, got); len(d) != 1 || d[0] != "images" {
			t.Errorf("diff %v, want images only", d)
		}
	})

	t.Run("addresses replaced", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.2.3"}, {Type: v1.NodeExternalDNS, Address: "x.example"}}
		got := desiredStatus(api, want, now)
		if d := statusDiff(api, got); len(d) != 1 || d[0] != "addresses" {
			t.Fatalf("diff %v", d)
		}
		if len(got.Addresses) != 2 || got.Addresses[0].Address != "127.0.0.1" {
			t.Fatalf("addresses %v", got.Addresses)
		}
	})

	t.Run("capacity changed by hand", func(t *testing.T) {
		api := *want.DeepCopy()
		api.Capacity[v1.ResourceCPU] = resource.MustParse("64")
		api.Allocatable[v1.ResourceCPU] = resource.MustParse("64")
		got := desiredStatus(api, want, now)
		if q := got.Capacity[v1.ResourceCPU]; q.Value() != 2 {
			t.Fatalf("cpu capacity %s", q.String())
		}
		if q := got.Allocatable[v1.ResourceCPU]; q.MilliValue() != 1500 {
			t.Fatalf("cpu allocatable %s", q.String())
		}
	})
}

// reconcile writes only when the Node in the API differs from the node's
// status, and the write puts hostlet's status back.
func TestReconcilePatchesOnlyOnDifference(t *testing.T) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	mine := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: now, LastHeartbeatTime: now}},
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}},
		Capacity:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
	}}
	mine.Status.Allocatable = mine.Status.Capacity.DeepCopy()
	for _, tc := range []struct {
		name  string
		edit  func(*v1.Node)
		write bool
	}{
		{"in sync", func(*v1.Node) {}, false},
		{"marked unknown", func(n *v1.Node) {
			n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}, true},
		{"address edited", func(n *v1.Node) { n.Status.Addresses[0].Address = "10.9.9.9" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := mine.DeepCopy()
			tc.edit(api)
			client := fake.NewSimpleClientset(api)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := idx.Add(api); err != nil {
				t.Fatal(err)
			}
			n := &Node{cfg: Config{Name: "n", Lister: corelisters.NewNodeLister(idx), Client: client}, node: mine.DeepCopy()}
			n.reconcile(context.Background())
			var patches int
			for _, a := range client.Actions() {
				if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
					patches++
				}
			}
			if (patches > 0) != tc.write {
				t.Fatalf("%d status patches, want write=%v", patches, tc.write)
			}
			got, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d := statusDiff(got.Status, desiredStatus(got.Status, mine.Status, now)); len(d) != 0 {
				t.Fatalf("after reconcile the API still differs in %v: %+v", d, got.Status)
			}
		})
	}
}

// The Ready message for a node without a CNI config is the kubelet's with
// containerd, word for word.
func TestNodeNetworkNotReadyMessage(t *testing.T) {
	const want = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	if got := networkNotReady(runtime.ErrCNINotInitialized); got == nil || got.Error() != want {
		t.Errorf("got %v\nwant %s", got, want)
	}
	if networkNotReady(nil) != nil {
		t.Error("a ready network has a message")
	}
}

// The runtime handlers as the kubelet's setter reports them: each with
// both features set; hostlet's (from containerd) replace the API's.
func TestRuntimeHandlersStatus(t *testing.T) {
	got := NodeRuntimeHandlers([]runtime.RuntimeHandler{{Name: "", UserNamespaces: true, RecursiveReadOnlyMounts: true}, {Name: "crun"}})
	if len(got) != 2 || got[0].Name != "" || got[1].Name != "crun" {
		t.Fatalf("handlers %+v", got)
	}
	for _, h := range got {
		if h.Features == nil || h.Features.RecursiveReadOnlyMounts == nil || h.Features.UserNamespaces == nil {
			t.Errorf("%q: features %+v", h.Name, h.Features)
		}
	}
	if !*got[0].Features.RecursiveReadOnlyMounts || *got[1].Features.RecursiveReadOnlyMounts {
		t.Errorf("recursive read-only: default %v, crun %v", *got[0].Features.RecursiveReadOnlyMounts, *got[1].Features.RecursiveReadOnlyMounts)
	}
	if !*got[0].Features.UserNamespaces || *got[1].Features.UserNamespaces {
		t.Errorf("user namespaces: default %v, crun %v", *got[0].Features.UserNamespaces, *got[1].Features.UserNamespaces)
	}
	if none := NodeRuntimeHandlers(nil); none == nil || len(none) != 0 {
		t.Errorf("no handlers: %#v, want an empty list as the kubelet's", none)
	}

	api := v1.NodeStatus{RuntimeHandlers: []v1.NodeRuntimeHandler{{Name: "stale"}}}
	want := v1.NodeStatus{RuntimeHandlers: got}
	st := desiredStatus(api, want, metav1.Unix(1, 0))
	if len(st.RuntimeHandlers) != 2 || st.RuntimeHandlers[1].Name != "crun" {
		t.Errorf("desired handlers %+v", st.RuntimeHandlers)
	}
	if d := statusDiff(api, st); len(d) != 1 || d[0] != "runtimeHandlers" {
		t.Errorf("diff %v, want runtimeHandlers", d)
	}
}

// status.features as the kubelet's setter writes it, put back when someone
// removes it.
func TestNodeFeaturesStatus(t *testing.T) {
	want := v1.NodeStatus{Features: nodeFeatures()}
	if f := want.Features; f.SupplementalGroupsPolicy == nil || !*f.SupplementalGroupsPolicy {
		t.Fatalf("features %+v", f)
	}
	st := desiredStatus(v1.NodeStatus{}, want, metav1.Unix(1, 0))
	if st.Features == nil || !*st.Features.SupplementalGroupsPolicy {
		t.Fatalf("desired features %+v", st.Features)
	}
	if d := statusDiff(v1.NodeStatus{}, st); len(d) != 1 || d[0] != "features" {
		t.Errorf("diff %v, want features", d)
	}
}

// The pod capacity is maxPods, or podsPerCore per core when fewer, as the
// kubelet's MachineInfo setter.
func TestPodCapacity(t *testing.T) {
	for _, c := range []struct {
		maxPods, perCore, cores int
		want                    int64
	}{
		{110, 0, 4, 110},
		{110, 10, 4, 40},
		{110, 10, 16, 110},
		{30, 10, 3, 30},
	} {
		if got := podCapacity(c.maxPods, c.perCore, c.cores); got != c.want {
			t.Errorf("podCapacity(maxPods %d, podsPerCore %d, %d cores) = %d, want %d", c.maxPods, c.perCore, c.cores, got, c.want)
		}
	}
}

// localStorageCapacityIsolation: false leaves ephemeral-storage out of the
// capacity and allocatable, as the kubelet's.
func TestNoLocalStorageCapacity(t *testing.T) {
	for _, off := range []bool{false, true} {
		n := &Node{cfg: Config{RootDir: t.TempDir(), MaxPods: 10, NoLocalStorageCapacity: off}}
		c, err := n.capacity()
		if err != nil {
			t.Fatal(err)
		}
		_, inCap := c[v1.ResourceEphemeralStorage]
		_, inAlloc := n.allocatableFrom(c)[v1.ResourceEphemeralStorage]
		if inCap == off || inAlloc == off {
			t.Errorf("isolation off %v: ephemeral-storage in capacity %v, allocatable %v", off, inCap, inAlloc)
		}
	}
}
