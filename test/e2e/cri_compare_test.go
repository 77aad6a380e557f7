package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The same pods on a hostlet node and on an upstream kubelet node (the
// kubelet with containerd's CRI, on a second host of the same cluster): a
// running one that restarted once and one that ended. crictl's answers on
// both (pods, ps -a, inspect, inspectp, logs, images, stats, statsp, exec
// --sync of id and the network sysctls, version, info, imagefsinfo) are
// compared field by field, after what is per node (ids, times, IPs, UIDs,
// namespaces, directories, cgroup roots) is put into placeholders and
// what is measured (stats' figures) into whether it is there; verbose info
// maps by their keys and the values that say what (sandbox, runtime,
// snapshotter, a sandbox's config and states). Every field is compared;
// the ones that differ by design are criDesignDifferences, each with why.
func TestCRICompare(t *testing.T) {
	skipIfNoCluster(t)
	const hostletNode, kubeletNode = "hostlet-cmp", "kubelet-cmp"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	crictl, err := harness.BuildCrictl(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	host, err := c.AddHost(ctx, "b", harness.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop) // after the kubelet's, before the cluster's
	imgs, err := images.BuildAll(ctx, filepath.Join(imageCache(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	pause, err := images.BuildPause(ctx, filepath.Join(imageCache(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	archives := []string{pause.Archive}
	for _, img := range imgs {
		archives = append(archives, img.Archive)
		if err := c.ImportImage(ctx, img.Archive); err != nil {
			t.Fatal(err)
		}
	}
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: hostletNode})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.StartKubelet(ctx, harness.KubeletOptions{NodeName: kubeletNode, SandboxImage: images.PauseRef,
		Images: archives, Host: host})
	if err != nil {
		t.Fatalf("kubelet: %v (logs: %s)", err, c.LogDir())
	}
	t.Cleanup(k.Stop)

	// The same pods on each node, in a namespace of its own: one with an
	// init container, a main one that exits once (3) and runs on
	// restarted, env, an emptyDir, a port, a pod security context (user,
	// groups, sysctl); one that has ended.
	nodes := []*criNode{
		{kind: "hostlet", node: hostletNode, socket: h.CRISocket(), roots: []string{h.PodLogsDir(), h.RootDir(), h.CgroupRoot()}},
		{kind: "kubelet", node: kubeletNode, socket: k.CRISocket(),
			roots: []string{filepath.Join(c.Dir(), "kubelet", kubeletNode, "pod-logs"), k.RootDir(),
				path.Dir(h.CgroupRoot()) + "/kubelet-" + kubeletNode}},
	}
	for _, n := range nodes {
		n.ns = c.NewNamespace(t)
		c.CreatePod(t, comparePod(n.ns, n.node))
		c.CreatePod(t, endedPod(n.ns, n.node))
	}
	for _, n := range nodes {
		p, err := c.WaitForPod(ctx, n.ns, "cmp", 3*time.Minute, func(p *v1.Pod) (bool, error) {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].Ready, nil
		})
		if err != nil {
			t.Fatalf("%s: the pod's main container restarted once and ready: %v", n.kind, err)
		}
		n.pod = p
		if n.ended, err = c.WaitForPod(ctx, n.ns, "done", time.Minute, harness.PodPhase(v1.PodSucceeded)); err != nil {
			t.Fatalf("%s: the ended pod: %v", n.kind, err)
		}
	}
	// A moment for what follows a start to settle on both (the log's
	// lines, the stats' first samples).
	time.Sleep(3 * time.Second)
	for _, n := range nodes {
		n.gather(t, ctx, crictl)
	}

	hv, kv := nodes[0].view, nodes[1].view
	var diffs []criDiff
	compareJSON(nil, hv, kv, &diffs)
	kept := 0
	for _, d := range diffs {
		if kind, why := designDifference(d.path); why != "" {
			kept++
			t.Logf("differs, %s: %s: hostlet %s, kubelet %s (%s)", kind, d.pathString(), short(d.hostlet), short(d.kubelet), why)
			continue
		}
		t.Errorf("differs: %s: hostlet %s, kubelet %s", d.pathString(), short(d.hostlet), short(d.kubelet))
	}
	t.Logf("%d differences, %d of them listed", len(diffs), kept)
	if t.Failed() {
		for _, n := range nodes {
			b, _ := json.MarshalIndent(n.view, "", "  ")
			t.Logf("%s's normalized answers:\n%s", n.kind, b)
		}
	}

	// A pulled image, which the imported ones are not: the same image
	// pulled through each node's CRI from a registry both reach, its
	// answers (inspecti, its images entry, the imageRef of a container
	// of it) compared whole for what names the registry: its tag and its
	// repo digest, which containerd records at a pull.
	reg, err := images.StartRegistry(c.APIServerIP()+":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	for _, dir := range []string{c.ContainerdHostsDir(), k.HostsDir()} {
		if err := harness.AllowInsecureRegistryIn(dir, reg.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	var busybox images.Image
	for _, img := range imgs {
		if img.Ref == images.BusyboxRef {
			busybox = img
		}
	}
	ref, err := reg.Push(ctx, busybox, "cmp/busybox:pulled")
	if err != nil {
		t.Fatal(err)
	}
	pulled := map[string]any{}
	for _, n := range nodes {
		pulled[n.kind] = n.gatherPulled(t, ctx, crictl, c, reg.Addr(), ref)
	}
	diffs = nil
	compareJSON([]string{"pulled"}, pulled["hostlet"], pulled["kubelet"], &diffs)
	for _, d := range diffs {
		t.Errorf("differs: %s: hostlet %s, kubelet %s", d.pathString(), short(d.hostlet), short(d.kubelet))
	}
	b, _ := json.MarshalIndent(pulled, "", "  ")
	t.Logf("the pulled image's answers:\n%s", b)
}

// gatherPulled pulls ref through the node's CRI and answers what names the
// registry at addr: inspecti's status and the images entry with their tags
// and repo digests filtered to the registry's (the imported image of the
// same content has names of its own on each node, see
// criDesignDifferences), and the imageRef (the pod status imageID) of a
// pod's container of ref.
func (n *criNode) gatherPulled(t *testing.T, ctx context.Context, crictl string, c *harness.Cluster, addr, ref string) any {
	t.Helper()
	n.crictl(t, ctx, crictl, "pull", ref)
	ofRegistry := func(img any) any {
		m, ok := img.(map[string]any)
		if !ok {
			return img
		}
		for _, k := range []string{"repoTags", "repoDigests"} {
			var kept []any
			for _, v := range list(m, k) {
				if s, _ := v.(string); strings.HasPrefix(s, addr+"/") {
					kept = append(kept, v)
				}
			}
			m[k] = kept
		}
		return m
	}
	view := map[string]any{"inspecti": ofRegistry(field(n.json(t, ctx, crictl, "inspecti", "-o", "json", ref), "status"))}
	for _, img := range list(n.json(t, ctx, crictl, "images", "-o", "json"), "images") {
		if slices.Contains(list(img, "repoTags"), any(ref)) {
			view["images"] = ofRegistry(img)
		}
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pulled", Namespace: n.ns},
		Spec: v1.PodSpec{NodeName: n.node, RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "c", Image: ref, ImagePullPolicy: v1.PullNever, Command: []string{"true"}}}},
	}
	c.CreatePod(t, pod)
	p, err := c.WaitForPod(ctx, n.ns, "pulled", time.Minute, harness.PodPhase(v1.PodSucceeded))
	if err != nil {
		t.Fatalf("%s: a pod of the pulled image: %v", n.kind, err)
	}
	view["pod imageID"] = p.Status.ContainerStatuses[0].ImageID
	// The pull recorded the repo digest: the kubelet's pod status names
	// the image by it (the same on both nodes is compared after).
	if id := p.Status.ContainerStatuses[0].ImageID; !strings.HasPrefix(id, addr+"/cmp/busybox@sha256:") {
		t.Errorf("%s: the pulled image's pod status imageID %q, want its repo digest", n.kind, id)
	}
	ps := n.json(t, ctx, crictl, "ps", "-a", "-o", "json", "--label", "io.kubernetes.pod.namespace="+n.ns, "--label", "io.kubernetes.pod.name=pulled")
	for _, ctr := range list(ps, "containers") {
		view["ps imageRef"] = field(ctr, "imageRef")
		view["ps image"] = field(ctr, "image")
		st := n.json(t, ctx, crictl, "inspect", "-o", "json", str(ctr, "id"))
		view["inspect image"], view["inspect imageRef"] = field(field(st, "status"), "image"), field(field(st, "status"), "imageRef")
	}
	return normalizeCRI(view, strings.NewReplacer(n.ns, "<namespace>", n.node, "<node>"), "")
}

// comparePod is the pod both nodes run.
func comparePod(ns, node string) *v1.Pod {
	data := []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cmp", Labels: map[string]string{"app": "cmp"},
			Annotations: map[string]string{"example.com/note": "compared"}},
		Spec: v1.PodSpec{
			NodeName:      node,
			RestartPolicy: v1.RestartPolicyAlways,
			SecurityContext: &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)), RunAsGroup: ptrTo(int64(3000)),
				FSGroup: ptrTo(int64(2000)), SupplementalGroups: []int64{4000},
				Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}},
			TerminationGracePeriodSeconds: ptrTo(int64(5)),
			InitContainers: []v1.Container{{Name: "init", Image: images.BusyboxRef, VolumeMounts: data,
				Command: []string{"sh", "-c", "echo init; echo ready > /data/init"}}},
			Containers: []v1.Container{{Name: "main", Image: images.BusyboxRef, VolumeMounts: data,
				Env:   []v1.EnvVar{{Name: "GREETING", Value: "hello"}},
				Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
				Command: []string{"sh", "-c", `echo "$GREETING from $(cat /data/init)"; ` +
					`if [ ! -e /data/once ]; then touch /data/once; echo exiting; exit 3; fi; echo again; exec sleep 3600`}}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		},
	}
}

// endedPod is the pod both nodes run to its end: a container that writes
// its termination message and exits 0.
func endedPod(ns, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done"},
		Spec: v1.PodSpec{NodeName: node, RestartPolicy: v1.RestartPolicyNever, TerminationGracePeriodSeconds: ptrTo(int64(5)),
			Containers: []v1.Container{{Name: "c", Image: images.BusyboxRef,
				Command: []string{"sh", "-c", "echo done; echo bye > /dev/termination-log"}}}},
	}
}

// criNode is one node under comparison and what crictl answered there.
type criNode struct {
	kind, node, socket, ns string
	roots                  []string // the pod logs dir, root dir and cgroup root
	pod, ended             *v1.Pod
	// view is crictl's answers, normalized: command -> its JSON (or log
	// text), lists keyed by what names their items.
	view map[string]any
}

func (n *criNode) crictl(t *testing.T, ctx context.Context, crictl string, args ...string) string {
	t.Helper()
	endpoint := "unix://" + n.socket
	cmd := exec.CommandContext(ctx, crictl, append([]string{"--config", os.DevNull, "--runtime-endpoint", endpoint,
		"--image-endpoint", endpoint, "--timeout", "20s"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: crictl %v: %v\n%s%s", n.kind, args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func (n *criNode) json(t *testing.T, ctx context.Context, crictl string, args ...string) any {
	t.Helper()
	out := n.crictl(t, ctx, crictl, args...)
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: crictl %v: %v\n%s", n.kind, args, err, out)
	}
	return v
}

// gather runs the crictl commands and normalizes their answers.
func (n *criNode) gather(t *testing.T, ctx context.Context, crictl string) {
	t.Helper()
	byNS := []string{"--label", "io.kubernetes.pod.namespace=" + n.ns, "--label", "io.kubernetes.pod.name=cmp"}
	pods := n.json(t, ctx, crictl, append([]string{"pods", "-o", "json"}, byNS...)...)
	items := list(pods, "items")
	if len(items) != 1 {
		t.Fatalf("%s: crictl pods: %v", n.kind, pods)
	}
	sandbox := str(items[0], "id")
	ps := n.json(t, ctx, crictl, append([]string{"ps", "-a", "-o", "json"}, byNS...)...)
	// Placeholders for what is per node, the longest first.
	repl := map[string]string{sandbox: "<sandbox-id>", string(n.pod.UID): "<pod-uid>", n.ns: "<namespace>", n.node: "<node>"}
	for _, ip := range n.pod.Status.PodIPs {
		repl[ip.IP] = "<pod-ip>"
	}
	for i, r := range n.roots {
		repl[r] = []string{"<pod-logs-dir>", "<root-dir>", "<cgroup-root>"}[i]
	}
	containers := map[string]any{}
	idOf := map[string]string{}
	var ids []string
	for _, ctr := range list(ps, "containers") {
		key := containerKey(ctr)
		id := str(ctr, "id")
		repl[id] = "<container-id " + key + ">"
		ids = append(ids, id)
		idOf[key] = id
		containers[key] = ctr
	}
	if len(containers) != 3 {
		t.Fatalf("%s: crictl ps -a: %v", n.kind, ps)
	}
	view := map[string]any{
		"pods":     map[string]any{sandboxKey: items[0]},
		"ps -a":    containers,
		"inspectp": n.json(t, ctx, crictl, "inspectp", "-o", "json", sandbox),
	}
	inspect, logs := map[string]any{}, map[string]any{}
	for _, id := range ids {
		st := n.json(t, ctx, crictl, "inspect", "-o", "json", id)
		key := containerKey(field(st, "status"))
		if m, ok := field(st, "status").(map[string]any); ok {
			m["mounts"] = keyed(m["mounts"], func(v any) string { return str(v, "containerPath") })
		}
		if m, ok := st.(map[string]any); ok {
			m["info"] = presentKeys(m["info"], criInfoValues)
		}
		inspect[key] = st
		logs[key] = n.crictl(t, ctx, crictl, "logs", id)
	}
	view["inspect"], view["logs"] = inspect, logs
	// What the running container is: its user and groups, the network
	// sysctls its sandbox was given.
	view["exec"] = n.crictl(t, ctx, crictl, "exec", "--sync", idOf["main/1"], "sh", "-c",
		"id; cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/net/ipv4/ping_group_range")
	imgs := map[string]any{}
	for _, img := range list(n.json(t, ctx, crictl, "images", "-o", "json"), "images") {
		imgs[imageKey(img)] = img
	}
	view["images"] = imgs
	view["stats"] = keyed(field(n.json(t, ctx, crictl, append([]string{"stats", "-o", "json"}, byNS...)...), "stats"),
		func(v any) string { return containerKey(field(v, "attributes")) })
	view["statsp"] = keyed(field(n.json(t, ctx, crictl, append([]string{"statsp", "-o", "json"}, byNS...)...), "stats"),
		func(any) string { return sandboxKey })
	if sp, ok := view["statsp"].(map[string]any)[sandboxKey].(map[string]any); ok {
		if l, ok := sp["linux"].(map[string]any); ok {
			l["containers"] = keyed(l["containers"], func(v any) string { return containerKey(field(v, "attributes")) })
		}
	}
	if m, ok := view["inspectp"].(map[string]any); ok {
		m["info"] = presentKeys(m["info"], criSandboxInfoValues)
	}
	view["stats"], view["statsp"] = statsShape(view["stats"], ""), statsShape(view["statsp"], "")
	// The runtime's own answers: its version; its status, conditions
	// compared as they are, the verbose info by its keys; the image
	// filesystem's shape.
	view["version"] = n.crictl(t, ctx, crictl, "version")
	info := n.json(t, ctx, crictl, "info", "-o", "json")
	if m, ok := info.(map[string]any); ok {
		for k, v := range m {
			if k != "status" {
				m[k] = presentKeys(v, nil)
			}
		}
	}
	view["info"] = info
	view["imagefsinfo"] = statsShape(n.json(t, ctx, crictl, "imagefsinfo", "-o", "json"), "")
	n.gatherEnded(t, ctx, crictl, view, repl)
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range repl {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k, repl[k])
	}
	n.view = normalizeCRI(view, strings.NewReplacer(pairs...), "").(map[string]any)
}

// gatherEnded adds the ended pod's answers to view ("ended-..."): its
// sandbox stopped, its container exited, no stats; its per-node strings
// to repl.
func (n *criNode) gatherEnded(t *testing.T, ctx context.Context, crictl string, view map[string]any, repl map[string]string) {
	t.Helper()
	byPod := []string{"--label", "io.kubernetes.pod.namespace=" + n.ns, "--label", "io.kubernetes.pod.name=done"}
	items := list(n.json(t, ctx, crictl, append([]string{"pods", "-o", "json"}, byPod...)...), "items")
	if len(items) != 1 {
		t.Fatalf("%s: crictl pods of the ended pod: %v", n.kind, items)
	}
	sandbox := str(items[0], "id")
	repl[sandbox], repl[string(n.ended.UID)] = "<sandbox-id done>", "<pod-uid done>"
	for _, ip := range n.ended.Status.PodIPs {
		repl[ip.IP] = "<pod-ip done>"
	}
	view["ended-pods"] = items[0]
	inspectp := n.json(t, ctx, crictl, "inspectp", "-o", "json", sandbox)
	if m, ok := inspectp.(map[string]any); ok {
		m["info"] = presentKeys(m["info"], criSandboxInfoValues)
	}
	view["ended-inspectp"] = inspectp
	ps := list(n.json(t, ctx, crictl, append([]string{"ps", "-a", "-o", "json"}, byPod...)...), "containers")
	if len(ps) != 1 {
		t.Fatalf("%s: crictl ps -a of the ended pod: %v", n.kind, ps)
	}
	id := str(ps[0], "id")
	repl[id] = "<container-id done>"
	view["ended-ps"] = ps[0]
	st := n.json(t, ctx, crictl, "inspect", "-o", "json", id)
	if m, ok := st.(map[string]any); ok {
		m["info"] = presentKeys(m["info"], criInfoValues)
		if s, ok := m["status"].(map[string]any); ok {
			s["mounts"] = keyed(s["mounts"], func(v any) string { return str(v, "containerPath") })
		}
	}
	view["ended-inspect"] = st
	view["ended-logs"] = n.crictl(t, ctx, crictl, "logs", id)
	view["ended-statsp"] = field(n.json(t, ctx, crictl, append([]string{"statsp", "-o", "json"}, byPod...)...), "stats")
}

const sandboxKey = "cmp"

func containerKey(v any) string {
	md := field(v, "metadata")
	return fmt.Sprintf("%s/%v", str(md, "name"), attemptOf(md))
}

func attemptOf(md any) any {
	if a := field(md, "attempt"); a != nil {
		return a
	}
	return float64(0)
}

// imageKey is an image by its first tag (the pause image's differs in name
// only), else its id.
func imageKey(v any) string {
	if tags := list(v, "repoTags"); len(tags) > 0 {
		if s, ok := tags[0].(string); ok {
			return s
		}
	}
	return str(v, "id")
}

func field(v any, k string) any {
	if m, ok := v.(map[string]any); ok {
		return m[k]
	}
	return nil
}

func str(v any, k string) string {
	s, _ := field(v, k).(string)
	return s
}

func list(v any, k string) []any {
	l, _ := field(v, k).([]any)
	return l
}

// keyed turns a JSON list into a map by key (lists whose order is not an
// answer of CRI's).
func keyed(v any, key func(any) string) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for _, e := range l {
		out[key(e)] = e
	}
	return out
}

// criInfoValues are the verbose info's values compared as they are (the
// others by their keys only): whose sandbox, on which runtime and
// snapshotter.
var criInfoValues = map[string]bool{"sandboxID": true, "runtimeType": true, "snapshotter": true, "removing": true}

// criSandboxInfoValues are a sandbox's verbose info's values compared as
// they are: the state of its process and network namespace, the kubelet's
// sandbox config (its security context, namespaces, DNS, ports...).
var criSandboxInfoValues = map[string]bool{"processStatus": true, "netNamespaceClosed": true, "config": true}

// presentKeys is a verbose info map compared loosely: its keys (and the
// values of those values names); a value not a map only as there.
func presentKeys(v any, values map[string]bool) any {
	m, ok := v.(map[string]any)
	if !ok {
		return "<present>"
	}
	out := map[string]any{}
	for k, e := range m {
		out[k] = "<present>"
		if values[k] {
			out[k] = e
		}
	}
	return out
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// statsShape keeps of the stats' figures whether they are there and not
// zero (the two nodes' containers use what they use); the attributes stay.
// A writable layer's figures are there or not: containerd measures its
// snapshots every 10s, not yet or 0 on its first answers; so is a CPU
// rate, 0 on a container's first sample (whoever asked before).
func statsShape(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch {
			case k == "attributes":
				out[k] = e
			case key == "writableLayer" && k != "fsId", key == "usageNanoCores":
				out[k] = "<measure>"
			default:
				out[k] = statsShape(e, k)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = statsShape(e, key)
		}
		return out
	case float64:
		if x != 0 {
			return "<n>"
		}
	case string:
		if digits.MatchString(x) && x != "0" {
			return "<n>"
		}
	}
	return v
}

// criTimeKeys are CRI's times (RFC 3339 in inspect's status, nanoseconds
// elsewhere): per node, kept only as set or not.
var criTimeKeys = map[string]bool{"createdAt": true, "startedAt": true, "finishedAt": true, "timestamp": true,
	"kubernetes.io/config.seen": true}

// criRandomPath is the termination-log file name (8 hex digits per
// container instance: the kubelet's random ones, hostlet's of the id).
var criRandomPath = regexp.MustCompile(`/containers/([^/]+)/[0-9a-f]{8}$`)

// criSnapshotter is a snapshotter's root in its containerd's (the image
// filesystem), a directory of each node's.
var criSnapshotter = regexp.MustCompile(`^/.*/(io\.containerd\.snapshotter\.v1\.[a-z]+)$`)

// criAPIAccess is the service account token volume's name, which the API
// server's admission gives each pod (a random suffix).
var criAPIAccess = regexp.MustCompile(`kube-api-access-[a-z0-9]{5}`)

// normalizeCRI puts the per-node strings into placeholders and times into
// "<time>" (a zero time stays as it is: not set).
func normalizeCRI(v any, r *strings.Replacer, key string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[r.Replace(k)] = normalizeCRI(e, r, k)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeCRI(e, r, key)
		}
		return out
	case string:
		if criTimeKeys[key] && x != "0" && x != "" && !strings.HasPrefix(x, "1970-01-01T00:00:00") {
			return "<time>"
		}
		x = criAPIAccess.ReplaceAllString(r.Replace(x), "kube-api-access-<random>")
		x = criSnapshotter.ReplaceAllString(x, "<containerd-root>/$1")
		return criRandomPath.ReplaceAllString(x, "/containers/$1/<random>")
	case float64:
		if criTimeKeys[key] && x != 0 {
			return "<time>"
		}
	}
	return v
}

// criDiff is one field whose answers differ.
type criDiff struct {
	path             []string
	hostlet, kubelet any
}

func (d criDiff) pathString() string { return strings.Join(d.path, " › ") }

// compareJSON records every leaf where a and b differ (a missing field
// as nil).
func compareJSON(path []string, a, b any, out *[]criDiff) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		}) {
			compareJSON(append(slices.Clone(path), k), am[k], bm[k], out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			compareJSON(append(slices.Clone(path), fmt.Sprint(i)), al[i], bl[i], out)
		}
		return
	}
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	if !bytes.Equal(ab, bb) {
		*out = append(*out, criDiff{path: path, hostlet: a, kubelet: b})
	}
}

func short(v any) string {
	if v == nil {
		return "(none)"
	}
	b, _ := json.Marshal(v)
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// criDesignDifferences are the fields whose answers differ by design, or
// because the two nodes are set up differently: path patterns (segments as
// compareJSON's path, "*" one segment, a last "**" anything below) and why.
var criDesignDifferences = []struct {
	pattern string
	why     string
}{
	{"images hostlet.local/pause:3.10 **",
		"hostlet has no pause image: a sandbox is namespaces hostlet holds itself, no pause container (the kubelet's containerd pins its sandbox image)"},
	{"info config", "containerd's CRI plugin configuration: hostlet's containerd runs no CRI plugin, its configuration is the kubelet's (the node's /configz)"},
	{"imagefsinfo status imageFilesystems * usedBytes value",
		"hostlet's image filesystem use is the filesystem's, as /stats/summary's imageFs (containerd's CRI sums its snapshots', measured every 10s)"},
	{"imagefsinfo status imageFilesystems * inodesUsed value",
		"hostlet's image filesystem inodes are the filesystem's, as /stats/summary's imageFs (containerd's CRI sums its snapshots')"},
	{"ended-inspectp info config dns_config", "hostlet released the ended pod's sandbox (its files, its pod cgroup) at its end; containerd keeps a stopped sandbox's config until the kubelet removes it"},
	{"ended-inspectp info config hostname", "hostlet released the ended pod's sandbox (its files) at its end; containerd keeps a stopped sandbox's config"},
	{"ended-inspectp info config linux cgroup_parent", "hostlet released the ended pod's cgroup at its end; containerd keeps a stopped sandbox's config"},
	// The kubelet's containerd has the images imported (ctr's import, no
	// pull): no digested reference was recorded, so its CRI lists no repo
	// digest and answers the image ID as imageRef (the kubelet's pod
	// status imageID). hostlet names an image's repo digest from its
	// manifest, as a pull records it. A pulled image's names are compared
	// after the rest (gatherPulled): there both nodes must agree.
	{"images * repoDigests", "the kubelet's images are imported, not pulled (no repo digest recorded); hostlet names the manifest's"},
	{"ended-inspect status imageRef", "the kubelet's images are imported, not pulled: its imageRef is the image ID for want of a repo digest"},
	{"inspect * status imageRef", "the kubelet's images are imported, not pulled: its imageRef is the image ID for want of a repo digest"},
}

// criGaps are what hostlet does not answer as containerd's CRI yet
// (reported, not failed on: each is work left).
var criGaps = []struct {
	pattern string
	why     string
}{}

// designDifference is why the field at path differs, "" when it must not:
// the kind ("by design", "hostlet's gap") and the reason.
func designDifference(path []string) (kind, why string) {
	for _, d := range criDesignDifferences {
		if matchPath(strings.Fields(d.pattern), path) {
			return "by design", d.why
		}
	}
	for _, d := range criGaps {
		if matchPath(strings.Fields(d.pattern), path) {
			return "hostlet's gap, left to do", d.why
		}
	}
	return "", ""
}

func matchPath(pattern, path []string) bool {
	for i, p := range pattern {
		if p == "**" {
			return true
		}
		if i >= len(path) || p != "*" && p != path[i] {
			return false
		}
	}
	return len(pattern) == len(path)
}
