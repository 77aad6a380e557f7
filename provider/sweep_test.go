package provider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	"k8s.io/apimachinery/pkg/types"
)

type sweepContainers struct {
	Containers
	list []runtime.ContainerStatus
	// cgroups are the pods with a cgroup.
	cgroups []string
}

func (c sweepContainers) PodCgroupUIDs() ([]string, error) { return c.cgroups, nil }

func (c sweepContainers) ListContainers(context.Context, string) ([]runtime.ContainerStatus, error) {
	return c.list, nil
}

type sweepHost struct {
	Host
	cleaned []string
}

func (h *sweepHost) Cleanup(_ context.Context, uid, namespace, name string) {
	h.cleaned = append(h.cleaned, uid+" "+namespace+"/"+name)
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
