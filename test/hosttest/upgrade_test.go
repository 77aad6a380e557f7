package hosttest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upgrade replaces the previous release's package with this one's on the
// joined host while a pod runs, as docs/upgrades.md says (apt-get install
// of the new .deb, then systemctl restart hostlet): the pod's container is
// the same one (ID, restart count, process and its start time), its status
// unchanged (Ready since the same time) and its log one sequence read
// through the new hostlet. Then the chart (once per run), and a downgrade
// back to the previous package, which the installed package refuses on a
// joined host.
func (h *host) upgrade(ctx context.Context) {
	t := h.t
	prev, cur := *h.previous, h.release
	const name = "across-upgrade"
	h.cluster.CreatePod(t, h.pod(name, 1, nil, "sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 1; done"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, name, 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	// The log through the API: the node's serving certificate must be
	// issued first (the previous release's approver does it).
	n0 := h.logLines(ctx, name, 3)
	before := h.containerState(ctx, name)
	t.Logf("before the upgrade (%s): %s, %d log lines", prev.version, before, n0)

	t0 := time.Now()
	pid0 := h.vm.Run(ctx, "systemctl show -p MainPID --value hostlet")
	out := h.vm.Run(ctx, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q /mnt/payload/deb/"+debName(cur)+" 2>&1")
	t.Logf("apt-get install ./%s:\n%s", debName(cur), out)
	installed := time.Since(t0)
	if !strings.Contains(out, "the node runs the previous hostlet until: systemctl restart hostlet") {
		t.Errorf("the package's postinst does not say the node runs the previous hostlet until a restart:\n%s", out)
	}
	state := h.vm.Run(ctx, "dpkg-query -W -f '${Version} ${Status}\n' hostlet; hostlet version; systemctl show -p MainPID --value hostlet")
	if !strings.Contains(state, debVersion(cur)+" install ok installed\n") || !strings.Contains(state, "hostlet "+cur.version+" ") {
		t.Errorf("after apt-get install ./%s: %s", debName(cur), state)
	}
	if !strings.HasSuffix(state, pid0) {
		t.Errorf("installing the package restarted hostlet (MainPID %s, then %s)", strings.TrimSpace(pid0), state)
	}

	t1 := time.Now()
	h.vm.Run(ctx, "systemctl restart hostlet")
	// A new pod Running shows the new hostlet has synced.
	h.cluster.CreatePod(t, h.pod("after-upgrade", 1, nil, "sleep", "3603"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "after-upgrade", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: upgrade %s -> %s: apt-get install %v, restart to a new pod Running %v", h.name, prev.version, cur.version,
		installed.Round(100*time.Millisecond), time.Since(t1).Round(100*time.Millisecond))
	running := h.vm.Run(ctx, "readlink /proc/$(systemctl show -p MainPID --value hostlet)/exe")
	if strings.TrimSpace(running) != "/usr/bin/hostlet" {
		t.Errorf("hostlet.service runs %s", running)
	}
	// The unit stays the one the previous release's join wrote: the
	// package writes none (docs/upgrades.md).
	unit := h.vm.Run(ctx, "systemctl show hostlet -p Type -p WatchdogUSec | tr '\\n' ' '")
	t.Logf("hostlet.service after the upgrade : %s", unit)
	after := h.containerState(ctx, name)
	t.Logf("after the upgrade (%s): %s", cur.version, after)
	if after != before {
		t.Errorf("the upgrade changed the pod's container:\n before %s\n after  %s", before, after)
	}
	n1 := h.logLines(ctx, name, n0+3)
	t.Logf("kubectl logs %s through %s: %d lines, one sequence", name, cur.version, n1)

	if h.chart.installed.version != cur.version {
		t0 := time.Now()
		h.chart.upgrade(ctx, t, h.cluster, cur)
		h.tm.add("%s: helm upgrade %s -> %s, approver rolled out in %v", h.name, prev.version, cur.version, time.Since(t0).Round(100*time.Millisecond))
	}

	// The downgrade: refused by the installed package's prerm.
	out, err := h.vm.run(ctx, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades /mnt/payload/deb/"+debName(prev)+" 2>&1")
	t.Logf("apt-get install --allow-downgrades ./%s (failed: %v):\n%s", debName(prev), err != nil, out)
	if err == nil || !strings.Contains(out, "hostlet: refusing to downgrade hostlet "+debVersion(cur)+" to "+debVersion(prev)) {
		t.Errorf("the downgrade to %s on a joined host was not refused by the package", prev.version)
	}
	state = h.vm.Run(ctx, "dpkg-query -W -f '${Version} ${Status}\n' hostlet; hostlet version; systemctl is-active hostlet")
	if !strings.Contains(state, debVersion(cur)+" install ok installed\n") || !strings.Contains(state, "hostlet "+cur.version+" ") ||
		!strings.HasSuffix(state, "\nactive\n") {
		t.Errorf("after the refused downgrade: %s", state)
	}
	if again := h.containerState(ctx, name); again != before {
		t.Errorf("after the refused downgrade the pod's container is %s, was %s", again, before)
	}
	h.deletePods(ctx, name, "after-upgrade")
}

// containerState is what must not change across an upgrade: the pod's
// phase and Ready condition (since when), its one container's ID, restart
// count and start, the container's process in the VM and its start time
// (clock ticks after boot: a PID reused would differ).
func (h *host) containerState(ctx context.Context, name string) string {
	t := h.t
	p, err := h.cluster.Client().CoreV1().Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("pod %s: %s", name, harness.DescribePodStatus(p))
	}
	cs := p.Status.ContainerStatuses[0]
	var ready string
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			ready = fmt.Sprintf("%s since %s", c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339))
		}
	}
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	proc := strings.TrimSpace(h.vm.Run(ctx, fmt.Sprintf(`pid=$(ctr -n hostlet tasks ls | awk '$1 == "%s" {print $2}'); echo pid $pid started $(cut -d' ' -f22 /proc/$pid/stat)`, id)))
	return fmt.Sprintf("%s, Ready %s, container %.12s restarts %d running since %s, %s", p.Status.Phase, ready, id,
		cs.RestartCount, cs.State.Running.StartedAt.UTC().Format(time.RFC3339), proc)
}

// logLines waits for the pod's log, read through the API server and the
// node, to hold at least min lines and returns how many it holds; the
// lines must be one count from 0 (no line lost or repeated, no second
// container's).
func (h *host) logLines(ctx context.Context, name string, min int) int {
	t := h.t
	var n int
	err := poll(ctx, 5*time.Minute, func() error {
		logs, err := h.cluster.Kubectl(ctx, "logs", "-n", h.ns, name)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(logs), "\n")
		for i, l := range lines {
			if l != "line "+strconv.Itoa(i) {
				t.Fatalf("kubectl logs %s: line %d is %q, want %q: the log is not one sequence:\n%s", name, i, l, "line "+strconv.Itoa(i), logs)
			}
		}
		if n = len(lines); n < min {
			return fmt.Errorf("%d lines, waiting for %d", n, min)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kubectl logs %s: %v", name, err)
	}
	return n
}

// debVersion is the package's version, from its file name
// (hostlet_<version>_amd64.deb).
func debVersion(r release) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r.deb), "hostlet_"), "_amd64.deb")
}
