package provider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

type sweepContainers struct {
	Containers
	list []runtime.ContainerStatus
	// cgroups are the pods with a cgroup.
	cgroups []string
}

func (c sweepContainers) PodCgroupUIDs() ([]string, error) { return c.cgroups, nil }

func (c sweepContainers) RemoveDeadLogLinks(context.Context) int { return 0 }

func (c sweepContainers) ListContainers(context.Context, string) ([]runtime.ContainerStatus, error) {
	return c.list, nil
}

type sweepHost struct {
	Host
	cleaned, released []string
}

func (h *sweepHost) Cleanup(_ context.Context, uid, namespace, name string) error {
	h.cleaned = append(h.cleaned, uid+" "+namespace+"/"+name)
	return nil
}

// The sweep removes what this hostlet made for pods that are gone, and
// leaves alone the pods it still knows and the containers of another
// hostlet sharing the containerd namespace (they log under its pod logs
// dir). A pod's log directory alone, under --pod-logs-dir or under the
// root dir where a hostlet of before that flag kept logs, is a leftover;
// so is a pod's cgroup alone (a pod removed while hostlet was down).
func TestSweepRemovesOnlyOwnOrphans(t *testing.T) {
	p, api := testRegistry(t)
	root := t.TempDir()
	p.cfg.RootDir = root
	logs := filepath.Join(t.TempDir(), "pods")
	p.cfg.PodLogsDir = logs
	host := &sweepHost{}
	p.host = host
	legacy := filepath.Join(root, "logs")
	p.rt = sweepContainers{list: []runtime.ContainerStatus{
		{PodUID: "live", LogPath: filepath.Join(logs, "ns_web_live", "c", "0.log")},
		{PodUID: "gone", LogPath: filepath.Join(logs, "ns_old_gone", "c", "0.log")},
		{PodUID: "older", LogPath: filepath.Join(legacy, "ns_older_older", "c", "0.log")},
		{PodUID: "other", LogPath: filepath.Join(t.TempDir(), "pods", "ns_x_other", "c", "0.log")},
	}, cgroups: []string{"live", "gone", "cgonly"}}
	for _, d := range []string{filepath.Join(logs, "ns_old_gone"), filepath.Join(root, "pods", "dironly"),
		filepath.Join(legacy, "ns_older_older"), filepath.Join(logs, "ns_logsonly_lo"), filepath.Join(logs, "ns_web_live")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = api.Add(registryPod("web", types.UID("live")))
	p.sweep(context.Background(), p.lister)
	slices.Sort(host.cleaned)
	if want := []string{"cgonly /", "dironly /", "gone ns/old", "lo ns/logsonly", "older ns/older"}; !slices.Equal(host.cleaned, want) {
		t.Fatalf("cleaned %q, want %q", host.cleaned, want)
	}
}

func (h *sweepHost) ReleasePod(_ context.Context, pod *v1.Pod) {
	h.released = append(h.released, string(pod.UID))
}

// Pods that ended and have no worker (a restarted hostlet is not given
// them) are released by the sweep, once each; those with a worker are
// their worker's, those still running or being deleted are left alone.
func TestSweepReleasesTerminalPods(t *testing.T) {
	p, api := testRegistry(t)
	p.cfg.RootDir = t.TempDir()
	host := &sweepHost{}
	p.host = host
	p.rt = sweepContainers{}
	phase := func(pod *v1.Pod, ph v1.PodPhase) *v1.Pod { pod.Status.Phase = ph; return pod }
	worked := phase(registryPod("worked", "worked"), v1.PodFailed)
	p.register(worked)
	deleting := phase(registryPod("deleting", "deleting"), v1.PodFailed)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	for _, pod := range []*v1.Pod{
		phase(registryPod("evicted", "evicted"), v1.PodFailed),
		phase(registryPod("done", "done"), v1.PodSucceeded),
		phase(registryPod("running", "running"), v1.PodRunning),
		worked, deleting,
	} {
		_ = api.Add(pod)
	}
	p.sweep(context.Background(), p.lister)
	slices.Sort(host.released)
	if want := []string{"done", "evicted"}; !slices.Equal(host.released, want) {
		t.Fatalf("released %q, want %q", host.released, want)
	}
	host.released = nil
	p.sweep(context.Background(), p.lister)
	if len(host.released) != 0 {
		t.Fatalf("released again: %q", host.released)
	}
	if len(host.cleaned) != 0 {
		t.Fatalf("cleaned %q: terminal pods in the API are not orphans", host.cleaned)
	}
}

// hostState is a host whose cleanup removes what it holds of a pod, but
// for stuck pods.
type hostState struct {
	Host
	list       []runtime.ContainerStatus
	cgroups    []string
	root, logs string
	stuck      string
	cleaned    []string
}

// hostContainers is the runtime side of a hostState.
type hostContainers struct {
	Containers
	h *hostState
}

func (c hostContainers) ListContainers(context.Context, string) ([]runtime.ContainerStatus, error) {
	return c.h.list, nil
}

func (c hostContainers) PodCgroupUIDs() ([]string, error) { return c.h.cgroups, nil }

func (c hostContainers) RemoveDeadLogLinks(context.Context) int { return 0 }

func (h *hostState) Cleanup(_ context.Context, uid, namespace, name string) error {
	h.cleaned = append(h.cleaned, uid+" "+namespace+"/"+name)
	if uid == h.stuck {
		return nil
	}
	h.list = slices.DeleteFunc(h.list, func(c runtime.ContainerStatus) bool { return c.PodUID == uid })
	h.cgroups = slices.DeleteFunc(h.cgroups, func(u string) bool { return u == uid })
	_ = os.RemoveAll(filepath.Join(h.root, "pods", uid))
	if namespace != "" {
		_ = os.RemoveAll(filepath.Join(h.logs, namespace+"_"+name+"_"+uid))
	}
	return nil
}

// What `hostlet leave` cleans once hostlet is stopped: every pod this
// hostlet left anything of, running ones too (a DaemonSet's, which a drain
// leaves), without asking the API; another hostlet's containers in the
// same containerd namespace are not its. A pod whose cleanup leaves
// something is reported.
func TestCleanupAll(t *testing.T) {
	p, _ := testRegistry(t)
	h := &hostState{root: t.TempDir(), logs: t.TempDir(), stuck: "stuck"}
	p.cfg.RootDir, p.cfg.PodLogsDir = h.root, h.logs
	p.host, p.rt = h, hostContainers{h: h}
	h.list = []runtime.ContainerStatus{
		{PodUID: "ds", State: runtime.StateRunning, LogPath: filepath.Join(h.logs, "kube-system_ds_ds", "c", "0.log")},
		{PodUID: "other", LogPath: filepath.Join(t.TempDir(), "ns_x_other", "c", "0.log")},
	}
	h.cgroups = []string{"ds", "stuck"}
	for _, d := range []string{filepath.Join(h.logs, "kube-system_ds_ds"), filepath.Join(h.root, "pods", "ds"), filepath.Join(h.root, "pods", "ended")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	left, err := p.CleanupAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(h.cleaned)
	if want := []string{"ds kube-system/ds", "ended /", "stuck /"}; !slices.Equal(h.cleaned, want) {
		t.Errorf("cleaned %q, want %q", h.cleaned, want)
	}
	if !slices.Equal(left, []string{"stuck"}) {
		t.Errorf("left %q, want the stuck pod only", left)
	}
	if len(h.list) != 1 || h.list[0].PodUID != "other" {
		t.Errorf("containers after: %v", h.list)
	}
}
