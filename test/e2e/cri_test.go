package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crictl, the real client built from cri-tools, sees the node's pods
// through hostlet's CRI socket as on a kubelet node: version and info as
// containerd's CRI answers them; pods, inspectp, ps, inspect and images
// matching what the API has of the pods (ids, names, states, IPs, image
// refs, the kubelet's labels).
func TestCRICrictl(t *testing.T) {
	skipIfNoCluster(t)
	crictl, err := harness.BuildCrictl(ctxT(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := node.Crictl(ctxT(t), crictl, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Only root reaches the socket.
	for path, want := range map[string]os.FileMode{node.CRISocket(): os.ModeSocket | 0o600, filepath.Dir(node.CRISocket()): os.ModeDir | 0o700} {
		if st, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", path, err)
		} else if st.Mode()&(os.ModeType|os.ModePerm) != want {
			t.Errorf("%s: %v, want %v", path, st.Mode(), want)
		}
	}

	ns := cluster.NewNamespace(t)
	web := busybox(ns, "web", "sleep", "3600")
	web.Labels = map[string]string{"app": "cri"}
	web.Spec.InitContainers = []v1.Container{{Name: "init", Image: images.BusyboxRef, Command: []string{"true"}}}
	web.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	cluster.CreatePod(t, web)
	done := busybox(ns, "done", "sh", "-c", "echo bye > /dev/termination-log; exit 3")
	cluster.CreatePod(t, done)
	webPod := waitPhase(t, ns, "web", v1.PodRunning)
	donePod := waitPhase(t, ns, "done", v1.PodFailed)
	// The sandbox of an ended pod is released once its status is written:
	// crictl then shows it NOTREADY, as the kubelet's stopped sandbox.
	time.Sleep(2 * time.Second)

	// As an operator reads them (kept in the test's log).
	for _, args := range [][]string{{"pods", "--namespace", ns}, {"ps", "-a", "--namespace", ns}, {"images"}} {
		t.Logf("crictl %s:\n%s", strings.Join(args, " "), run(args...))
	}

	out := run("version")
	if !strings.Contains(out, "RuntimeName:  containerd") || !strings.Contains(out, "RuntimeApiVersion:  v1") {
		t.Errorf("crictl version:\n%s", out)
	}
	var info struct {
		Status struct {
			Conditions []struct {
				Type   string
				Status bool
			}
		}
	}
	if err := json.Unmarshal([]byte(run("info", "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, c := range info.Status.Conditions {
		ready[c.Type] = c.Status
	}
	if !ready["RuntimeReady"] || !ready["NetworkReady"] {
		t.Errorf("crictl info conditions: %+v", info.Status.Conditions)
	}

	// pods: one sandbox per pod of the namespace, with the kubelet's labels.
	var pods criapi.ListPodSandboxResponse
	decode(t, run("pods", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &pods)
	sandboxes := map[string]*criapi.PodSandbox{}
	for _, s := range pods.Items {
		sandboxes[s.Metadata.Name] = s
	}
	if len(sandboxes) != 2 || sandboxes["web"] == nil || sandboxes["done"] == nil {
		t.Fatalf("crictl pods: %v", pods.Items)
	}
	for _, tc := range []struct {
		pod   *v1.Pod
		state criapi.PodSandboxState
	}{{webPod, criapi.PodSandboxState_SANDBOX_READY}, {donePod, criapi.PodSandboxState_SANDBOX_NOTREADY}} {
		s := sandboxes[tc.pod.Name]
		if s.Metadata.Namespace != ns || s.Metadata.Uid != string(tc.pod.UID) || s.State != tc.state {
			t.Errorf("sandbox of %s: %v", tc.pod.Name, s)
		}
		for k, v := range map[string]string{"io.kubernetes.pod.name": tc.pod.Name, "io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.uid": string(tc.pod.UID)} {
			if s.Labels[k] != v {
				t.Errorf("sandbox of %s: label %s=%q, want %q", tc.pod.Name, k, s.Labels[k], v)
			}
		}
		if s.Annotations["kubernetes.io/config.source"] != "api" || s.Annotations["kubernetes.io/config.seen"] == "" {
			t.Errorf("sandbox of %s: annotations %v", tc.pod.Name, s.Annotations)
		}
	}
	if sandboxes["web"].Labels["app"] != "cri" {
		t.Errorf("the pod's labels: %v", sandboxes["web"].Labels)
	}
	var selected criapi.ListPodSandboxResponse
	decode(t, run("pods", "--label", "app=cri", "--state", "ready", "-o", "json"), &selected)
	if len(selected.Items) != 1 || selected.Items[0].Metadata.Uid != string(webPod.UID) {
		t.Errorf("crictl pods --label app=cri --state ready: %v", selected.Items)
	}

	// inspectp, by the truncated id crictl prints: the pod's IP.
	webID := sandboxes["web"].Id
	var sb criapi.PodSandboxStatus
	decodeStatus(t, run("inspectp", "-o", "json", webID[:13]), &sb)
	if sb.Id != webID || sb.State != criapi.PodSandboxState_SANDBOX_READY || sb.Network.GetIp() != webPod.Status.PodIP ||
		sb.Linux.GetNamespaces().GetOptions().GetNetwork() != criapi.NamespaceMode_POD {
		t.Errorf("inspectp web: %v (pod IP %s)", &sb, webPod.Status.PodIP)
	}

	// ps -a: every container the pod status names, by the id it shows.
	var ps criapi.ListContainersResponse
	decode(t, run("ps", "-a", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &ps)
	containers := map[string]*criapi.Container{}
	for _, c := range ps.Containers {
		containers[c.Id] = c
	}
	want := []struct {
		pod    *v1.Pod
		status v1.ContainerStatus
		state  criapi.ContainerState
	}{
		{webPod, webPod.Status.InitContainerStatuses[0], criapi.ContainerState_CONTAINER_EXITED},
		{webPod, webPod.Status.ContainerStatuses[0], criapi.ContainerState_CONTAINER_RUNNING},
		{donePod, donePod.Status.ContainerStatuses[0], criapi.ContainerState_CONTAINER_EXITED},
	}
	if len(ps.Containers) != len(want) {
		t.Errorf("crictl ps -a: %v", ps.Containers)
	}
	for _, w := range want {
		id := strings.TrimPrefix(w.status.ContainerID, "containerd://")
		c := containers[id]
		if c == nil {
			t.Errorf("container %s of %s (%s) not listed", w.status.Name, w.pod.Name, id)
			continue
		}
		if c.PodSandboxId != sandboxes[w.pod.Name].Id || c.Metadata.Name != w.status.Name || c.State != w.state ||
			c.Metadata.Attempt != uint32(w.status.RestartCount) || !strings.HasPrefix(c.Image.GetImage(), "sha256:") {
			t.Errorf("container %s of %s: %v", w.status.Name, w.pod.Name, c)
		}
		for k, v := range map[string]string{"io.kubernetes.container.name": w.status.Name, "io.kubernetes.pod.name": w.pod.Name,
			"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.uid": string(w.pod.UID)} {
			if c.Labels[k] != v {
				t.Errorf("container %s of %s: label %s=%q, want %q", w.status.Name, w.pod.Name, k, c.Labels[k], v)
			}
		}
		for _, k := range []string{"io.kubernetes.container.hash", "io.kubernetes.container.restartCount",
			"io.kubernetes.container.terminationMessagePath", "io.kubernetes.container.terminationMessagePolicy", "io.kubernetes.pod.terminationGracePeriod"} {
			if c.Annotations[k] == "" {
				t.Errorf("container %s of %s: no annotation %s: %v", w.status.Name, w.pod.Name, k, c.Annotations)
			}
		}

		// inspect: the image and its ref as the pod status has them, the
		// state's times and exit, the log file.
		var st criapi.ContainerStatus
		decodeStatus(t, run("inspect", "-o", "json", id), &st)
		if st.Id != id || st.State != w.state || st.ImageRef != w.status.ImageID || st.Image.GetImage() != w.status.Image {
			t.Errorf("inspect %s of %s: %v (status image %s, imageID %s)", w.status.Name, w.pod.Name, &st, w.status.Image, w.status.ImageID)
		}
		if _, err := os.Stat(st.LogPath); err != nil {
			t.Errorf("inspect %s of %s: log path: %v", w.status.Name, w.pod.Name, err)
		}
		if term := w.status.State.Terminated; term != nil {
			// The API's times are whole seconds.
			if st.ExitCode != term.ExitCode || st.Reason != term.Reason || st.FinishedAt/1e9 != term.FinishedAt.Unix() {
				t.Errorf("inspect %s of %s: exit %d %q at %d, the pod status %d %q at %s", w.status.Name, w.pod.Name, st.ExitCode, st.Reason, st.FinishedAt, term.ExitCode, term.Reason, term.FinishedAt)
			}
			if st.Message != term.Message {
				t.Errorf("inspect %s of %s: message %q, want %q", w.status.Name, w.pod.Name, st.Message, term.Message)
			}
		}
		if w.state == criapi.ContainerState_CONTAINER_RUNNING {
			if st.StartedAt/1e9 != w.status.State.Running.StartedAt.Unix() {
				t.Errorf("inspect %s: started %d, pod status %s", w.status.Name, st.StartedAt, w.status.State.Running.StartedAt)
			}
			hosts := false
			for _, m := range st.Mounts {
				hosts = hosts || m.ContainerPath == "/etc/hosts"
			}
			if !hosts {
				t.Errorf("inspect %s: mounts %v lack /etc/hosts", w.status.Name, st.Mounts)
			}
		}
	}

	// images: the pods' image by its tag, its ID the one ps shows.
	var imgs criapi.ListImagesResponse
	decode(t, run("images", "-o", "json"), &imgs)
	var busybox *criapi.Image
	for _, img := range imgs.Images {
		for _, tag := range img.RepoTags {
			if tag == webPod.Status.ContainerStatuses[0].Image {
				busybox = img
			}
		}
	}
	if busybox == nil {
		t.Fatalf("crictl images: no %s in %v", webPod.Status.ContainerStatuses[0].Image, imgs.Images)
	}
	runningID := strings.TrimPrefix(webPod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if c := containers[runningID]; c != nil && c.Image.GetImage() != busybox.Id {
		t.Errorf("ps image %s, images id %s", c.Image.GetImage(), busybox.Id)
	}
	digests := strings.Join(busybox.RepoDigests, ",")
	if !strings.Contains(digests, webPod.Status.ContainerStatuses[0].ImageID) || busybox.Size == 0 {
		t.Errorf("image %v: repo digests lack %s", busybox, webPod.Status.ContainerStatuses[0].ImageID)
	}
	if out := run("imagefsinfo", "-o", "json"); !strings.Contains(out, "mountpoint") {
		t.Errorf("crictl imagefsinfo: %s", out)
	}

	// stats: the running container's cgroup figures, by the id ps shows;
	// the exited ones have no task and no stats, as containerd's CRI. The
	// table samples twice (its CPU %), which needs the timestamps to move.
	var stats criapi.ListContainerStatsResponse
	decode(t, run("stats", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &stats)
	if len(stats.Stats) != 1 {
		t.Fatalf("crictl stats: %v", stats.Stats)
	}
	if st := stats.Stats[0]; st.Attributes.GetId() != runningID || st.Attributes.GetMetadata().GetName() != "c" ||
		st.Attributes.GetLabels()["io.kubernetes.pod.uid"] != string(webPod.UID) || st.Cpu.GetUsageCoreNanoSeconds().GetValue() == 0 ||
		st.Cpu.GetTimestamp() == 0 || st.Memory.GetWorkingSetBytes().GetValue() == 0 || st.Memory.GetTimestamp() == 0 {
		t.Errorf("crictl stats: %v", st)
	}
	var one criapi.ListContainerStatsResponse
	decode(t, run("stats", "--id", runningID[:13], "-o", "json"), &one)
	if len(one.Stats) != 1 || one.Stats[0].Attributes.GetId() != runningID {
		t.Errorf("crictl stats --id: %v", one.Stats)
	}
	if out := run("stats", "--label", "io.kubernetes.pod.namespace="+ns); !strings.Contains(out, "CPU %") || !strings.Contains(out, runningID[:13]) {
		t.Errorf("crictl stats:\n%s", out)
	}

	// statsp: the ready sandbox's pod cgroup, eth0 and its running
	// container; the ended pod's sandbox has none, as containerd's.
	var podStats criapi.ListPodSandboxStatsResponse
	decode(t, run("statsp", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &podStats)
	if len(podStats.Stats) != 1 {
		t.Fatalf("crictl statsp: %v", podStats.Stats)
	}
	if ps := podStats.Stats[0]; ps.Attributes.GetId() != webID || ps.Linux.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 ||
		ps.Linux.GetMemory().GetWorkingSetBytes().GetValue() == 0 || ps.Linux.GetNetwork().GetDefaultInterface().GetName() != "eth0" ||
		len(ps.Linux.GetContainers()) != 1 || ps.Linux.GetContainers()[0].GetAttributes().GetId() != runningID ||
		ps.Linux.GetProcess().GetProcessCount().GetValue() == 0 {
		t.Errorf("crictl statsp: %v", ps)
	}
	if out := run("statsp", "--label", "io.kubernetes.pod.namespace="+ns); !strings.Contains(out, "web") || !strings.Contains(out, webID[:13]) {
		t.Errorf("crictl statsp:\n%s", out)
	}

	// What hostlet does not do is refused with why.
	if _, err := node.Crictl(ctxT(t), crictl, "stopp", webID); err == nil || !strings.Contains(err.Error(), "only the pods the API server binds") {
		t.Errorf("crictl stopp: %v", err)
	}

	// exec --sync (ExecSync): the command's output and exit code, as
	// through the kubelet API's exec (crictl prints stdout, then stderr,
	// each with a newline after).
	if out := run("exec", "--sync", runningID[:13], "sh", "-c", "echo hi $HOSTNAME"); out != "hi web\n\n\n" {
		t.Errorf("crictl exec --sync: %q", out)
	}
	if _, err := node.Crictl(ctxT(t), crictl, "exec", "--sync", runningID, "sh", "-c", "exit 4"); err == nil || !strings.Contains(err.Error(), "exited with 4") {
		t.Errorf("crictl exec --sync exit 4: %v", err)
	}

	// stop: the container dies as on a kubelet node (SIGKILL with no
	// timeout); the pod's worker sees the exit and, restartPolicy Never,
	// the pod fails with the container's 137.
	if _, err := node.Crictl(ctxT(t), crictl, "stop", strings.Repeat("0", 64)); err == nil {
		t.Errorf("crictl stop of an id not hostlet's: no error")
	}
	run("stop", runningID[:13])
	stopped := waitPhase(t, ns, "web", v1.PodFailed)
	if term := stopped.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 137 {
		t.Errorf("after crictl stop: %+v", stopped.Status.ContainerStatuses[0].State)
	}
}

// decode reads crictl's -o json (protojson, a newer API than ours: fields
// we lack are skipped).
func decode(t *testing.T, out string, m proto.Message) {
	t.Helper()
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// decodeStatus reads inspect's and inspectp's -o json: {"status": ...,
// "info": ...}, where crictl writes the times as RFC 3339 rather than
// CRI's nanoseconds: put back, the status decodes as CRI's.
func decodeStatus(t *testing.T, out string, m proto.Message) {
	t.Helper()
	var v struct{ Status map[string]any }
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, k := range []string{"createdAt", "startedAt", "finishedAt"} {
		if s, ok := v.Status[k].(string); ok {
			if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
				v.Status[k] = strconv.FormatInt(ts.UnixNano(), 10)
			}
		}
	}
	b, err := json.Marshal(v.Status)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, string(b), m)
}
