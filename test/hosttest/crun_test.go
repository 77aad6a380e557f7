package hosttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crunRoot is where the runc shim keeps its runtime's state for hostlet's
// containerd namespace: the shim passes --root to whatever binary
// BinaryName names, so crun's containers are there too.
const crunRoot = "/run/containerd/runc/hostlet"

// crun runs pods with Debian 13's crun as a RuntimeClass handler (the
// setup script configures it in containerd as a runc-type runtime with
// BinaryName /usr/bin/crun): the node lists the handler, a pod of the
// class runs, its container was created by crun (crun's state lists it,
// runc's does not), and the start latency of crun pods against runc ones
// (issue 26 item 3) goes into the timings.
func (h *host) crun(ctx context.Context) {
	t := h.t
	cs := h.cluster.Client()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "crun"}, Handler: "crun"}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.NodeV1().RuntimeClasses().Delete(context.Background(), "crun", metav1.DeleteOptions{}) })

	var handlers []string
	err := poll(ctx, 2*time.Minute, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		handlers = handlers[:0]
		for _, rh := range n.Status.RuntimeHandlers {
			handlers = append(handlers, fmt.Sprintf("%q", rh.Name))
		}
		if !slices.Contains(handlers, `"crun"`) {
			return fmt.Errorf("node status.runtimeHandlers %v has no crun", handlers)
		}
		return nil
	})
	t.Logf("node status.runtimeHandlers: %v", handlers)
	if err != nil {
		t.Errorf("crun handler: %v", err)
	}

	// One pod of the class: does it run, and under crun?
	p := h.classPod("crun-check", "crun", "sleep", "3700")
	h.cluster.CreatePod(t, p)
	got, err := h.cluster.WaitForPod(ctx, h.ns, p.Name, 3*time.Minute, harness.PodPhase(v1.PodRunning))
	if err != nil {
		ev, _ := h.cluster.Kubectl(ctx, "get", "events", "-n", h.ns, "--field-selector", "involvedObject.name="+p.Name)
		t.Errorf("a pod of RuntimeClass crun did not run: %v\n%s", err, ev)
		if got != nil {
			t.Logf("its status: %s", harness.DescribePodStatus(got))
		}
		t.Logf("hostlet's journal:\n%s", h.vm.Run(ctx, "journalctl -u hostlet -b --no-pager | grep -i crun | tail -20"))
		h.deletePods(ctx, p.Name)
		return
	}
	out := h.vm.Run(ctx, `pid=$(pgrep -xf 'sleep 3700'); echo pid $pid
echo crun list:; crun --root `+crunRoot+` list 2>&1
echo runc list:; runc --root `+crunRoot+` list 2>&1
for f in /run/containerd/io.containerd.runtime.v2.task/hostlet/*/options.json; do echo "$f: $(cat $f)"; done`)
	t.Logf("on the VM:\n%s", out)
	pid := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	_, lists, _ := strings.Cut(out, "crun list:\n")
	crunList, runcList, _ := strings.Cut(lists, "runc list:\n")
	if len(pid) != 2 {
		t.Errorf("no process sleep 3700 on the VM")
	} else if !hasPid(crunList, pid[1]) || hasPid(runcList, pid[1]) {
		t.Errorf("the crun pod's process %s: crun does not list it, or runc does", pid[1])
	} else {
		t.Logf("the crun pod's process %s is a container of crun's (crun list), not of runc's", pid[1])
	}
	h.deletePods(ctx, p.Name)

	// Start latency, crun against runc, alternating so that the machine's
	// load (shared, TCG) weighs on both alike.
	const n = 5
	lat := map[string][]time.Duration{}
	for i := range n {
		for _, class := range []string{"crun", ""} {
			name := fmt.Sprintf("lat-%s-%d", orDefault(class, "runc"), i)
			p := h.classPod(name, class, "sleep", "3700")
			t0 := time.Now()
			h.cluster.CreatePod(t, p)
			if got, err := h.cluster.WaitForPod(ctx, h.ns, name, 3*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
				if got != nil {
					t.Logf("its status: %s", harness.DescribePodStatus(got))
				}
				t.Errorf("pod %s: %v", name, err)
				h.deletePods(ctx, name)
				return
			}
			lat[orDefault(class, "runc")] = append(lat[orDefault(class, "runc")], time.Since(t0))
			h.deletePods(ctx, name)
		}
	}
	for _, k := range []string{"crun", "runc"} {
		d := lat[k]
		all := make([]string, len(d))
		for i, x := range d {
			all[i] = x.Round(100 * time.Millisecond).String()
		}
		slices.Sort(d)
		h.tm.add("%s: pod of handler %s Running after its creation: median %v of %d (%s)", h.name, k,
			d[len(d)/2].Round(100*time.Millisecond), len(d), strings.Join(all, " "))
	}
}

func orDefault(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// hasPid: a `crun list`/`runc list` table has a row whose PID column is pid.
func hasPid(table, pid string) bool {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == pid {
			return true
		}
	}
	return false
}

// classPod is a pod of RuntimeClass class ("" none: the default runc).
func (h *host) classPod(name, class string, cmd ...string) *v1.Pod {
	p := h.pod(name, 1, nil, cmd...)
	if class != "" {
		p.Spec.RuntimeClassName = &class
	}
	return p
}

// deletePods deletes pods and waits for them to be gone (the node cleaned
// up after them), so that leave's leftover check sees none of them.
func (h *host) deletePods(ctx context.Context, names ...string) {
	t := h.t
	for _, name := range names {
		if err := h.cluster.Client().CoreV1().Pods(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if err := poll(ctx, 3*time.Minute, func() error {
			_, err := h.cluster.Client().CoreV1().Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("pod %s still there: %v", name, err)
		}); err != nil {
			t.Fatal(err)
		}
	}
}
