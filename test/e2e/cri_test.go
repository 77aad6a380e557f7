package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

		// inspect: the image and its ref as the pod status has them (the
		// same image: as containerd's CRI, the view names it by its first
		// tag and repo digest, which is another name of it when other
		// tests gave the shared image more), the state's times and exit,
		// the log file.
		var st criapi.ContainerStatus
		decodeStatus(t, run("inspect", "-o", "json", id), &st)
		digest := func(ref string) string { _, d, _ := strings.Cut(ref, "@"); return d }
		if st.Id != id || st.State != w.state || digest(st.ImageRef) == "" || digest(st.ImageRef) != digest(w.status.ImageID) || st.Image.GetImage() == "" {
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
			// No message, as containerd's CRI (one only for a failed
			// start): the kubelet reads the termination message itself.
			if st.Message != "" {
				t.Errorf("inspect %s of %s: message %q, want none", w.status.Name, w.pod.Name, st.Message)
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
	var busyboxImg *criapi.Image
	for _, img := range imgs.Images {
		for _, tag := range img.RepoTags {
			if tag == webPod.Status.ContainerStatuses[0].Image {
				busyboxImg = img
			}
		}
	}
	if busyboxImg == nil {
		t.Fatalf("crictl images: no %s in %v", webPod.Status.ContainerStatuses[0].Image, imgs.Images)
	}
	runningID := strings.TrimPrefix(webPod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if c := containers[runningID]; c != nil && c.Image.GetImage() != busyboxImg.Id {
		t.Errorf("ps image %s, images id %s", c.Image.GetImage(), busyboxImg.Id)
	}
	digests := strings.Join(busyboxImg.RepoDigests, ",")
	if !strings.Contains(digests, webPod.Status.ContainerStatuses[0].ImageID) || busyboxImg.Size == 0 {
		t.Errorf("image %v: repo digests lack %s", busyboxImg, webPod.Status.ContainerStatuses[0].ImageID)
	}
	if out := run("imagefsinfo", "-o", "json"); !strings.Contains(out, "mountpoint") {
		t.Errorf("crictl imagefsinfo: %s", out)
	}

	// stats: every container's, as containerd's CRI lists them: the
	// running one's cgroup figures, by the id ps shows; the exited ones no
	// task, their writable layer only. The table samples twice (its CPU
	// %), which needs the timestamps to move.
	var stats criapi.ListContainerStatsResponse
	decode(t, run("stats", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &stats)
	if len(stats.Stats) != len(want) {
		t.Fatalf("crictl stats: %v", stats.Stats)
	}
	for _, st := range stats.Stats {
		if st.WritableLayer.GetFsId().GetMountpoint() == "" {
			t.Errorf("crictl stats: no writable layer: %v", st)
		}
		if st.Attributes.GetId() != runningID {
			if st.Cpu != nil || st.Memory != nil {
				t.Errorf("crictl stats of an exited container: %v", st)
			}
			continue
		}
		if st.Attributes.GetMetadata().GetName() != "c" ||
			st.Attributes.GetLabels()["io.kubernetes.pod.uid"] != string(webPod.UID) || st.Cpu.GetUsageCoreNanoSeconds().GetValue() == 0 ||
			st.Cpu.GetTimestamp() == 0 || st.Memory.GetWorkingSetBytes().GetValue() == 0 || st.Memory.GetTimestamp() == 0 {
			t.Errorf("crictl stats: %v", st)
		}
	}
	var one criapi.ListContainerStatsResponse
	decode(t, run("stats", "--id", runningID[:13], "-o", "json"), &one)
	if len(one.Stats) != 1 || one.Stats[0].Attributes.GetId() != runningID {
		t.Errorf("crictl stats --id: %v", one.Stats)
	}
	if out := run("stats", "--label", "io.kubernetes.pod.namespace="+ns); !strings.Contains(out, "CPU %") || !strings.Contains(out, runningID[:13]) {
		t.Errorf("crictl stats:\n%s", out)
	}

	// statsp: the ready sandbox's pod cgroup, eth0 and its containers
	// (the exited init container's too); the ended pod's sandbox has none,
	// as containerd's.
	var podStats criapi.ListPodSandboxStatsResponse
	decode(t, run("statsp", "--label", "io.kubernetes.pod.namespace="+ns, "-o", "json"), &podStats)
	if len(podStats.Stats) != 1 {
		t.Fatalf("crictl statsp: %v", podStats.Stats)
	}
	if ps := podStats.Stats[0]; ps.Attributes.GetId() != webID || ps.Linux.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 ||
		ps.Linux.GetMemory().GetWorkingSetBytes().GetValue() == 0 || ps.Linux.GetNetwork().GetDefaultInterface().GetName() != "eth0" ||
		len(ps.Linux.GetContainers()) != 2 ||
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

	// exec (streaming: crictl's SPDY client on the URL Exec answers): the
	// command's output, stdin with -i, its exit code; -it in a terminal
	// (script(1) gives crictl one).
	if out := run("exec", runningID[:13], "sh", "-c", "echo out; echo err >&2"); out != "out\n" {
		t.Errorf("crictl exec: %q", out)
	}
	// crictl's websocket transport speaks only v5.channel.k8s.io, which
	// the kubelet's streaming server (as containerd's copy of it) does not:
	// refused in the handshake on a kubelet node too.
	if _, err := node.Crictl(ctxT(t), crictl, "exec", "--transport", "websocket", runningID, "true"); err == nil || !strings.Contains(err.Error(), "bad handshake (403 Forbidden)") {
		t.Errorf("crictl exec over websocket: %v", err)
	}
	if out, err := crictlStdin(t, crictl, "piped\n", "exec", "-i", runningID, "cat"); err != nil || out != "piped\n" {
		t.Errorf("crictl exec -i: %q %v", out, err)
	}
	if _, err := node.Crictl(ctxT(t), crictl, "exec", runningID, "sh", "-c", "exit 5"); err == nil || !strings.Contains(err.Error(), "exit code 5") {
		t.Errorf("crictl exec exit 5: %v", err)
	}
	if _, err := exec.LookPath("script"); err == nil {
		line := strings.Join(node.CrictlCommand(ctxT(t), crictl, "exec", "-it", runningID, "tty").Args, " ")
		b, err := exec.CommandContext(ctxT(t), "script", "-qec", line, "/dev/null").CombinedOutput()
		if err != nil || !strings.Contains(string(b), "/dev/pts/") {
			t.Errorf("crictl exec -it tty: %q %v", b, err)
		}
	}

	// port-forward into the sandbox's network namespace: a server bound
	// to the pod's own localhost is reached.
	cluster.CreatePod(t, testapp(ns, "pf", "--http=127.0.0.1:9090"))
	pfPod := waitPhase(t, ns, "pf", v1.PodRunning)
	var pfPods criapi.ListPodSandboxResponse
	decode(t, run("pods", "--label", "io.kubernetes.pod.uid="+string(pfPod.UID), "-o", "json"), &pfPods)
	if len(pfPods.Items) != 1 {
		t.Fatalf("crictl pods of pf: %v", pfPods.Items)
	}
	var body string
	pollUntil(t, 30*time.Second, "crictl port-forward", func() bool {
		body, err = crictlForward(t, crictl, pfPods.Items[0].Id[:13], 9090, "/echo?msg=forwarded")
		return err == nil
	})
	if body != "forwarded" {
		t.Errorf("through crictl port-forward: %q", body)
	}

	// attach: a session joins the container's own stdin and stdout.
	talk := busybox(ns, "talk", "sh", "-c", `while read l; do echo "got $l"; done`)
	talk.Spec.RestartPolicy = v1.RestartPolicyAlways
	talk.Spec.Containers[0].Stdin = true
	cluster.CreatePod(t, talk)
	talkPod := waitPhase(t, ns, "talk", v1.PodRunning)
	talkID := strings.TrimPrefix(talkPod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if err := crictlAttach(t, crictl, talkID, "hi\n", "got hi"); err != nil {
		t.Errorf("crictl attach: %v", err)
	}

	// events, while the next steps run: the container events evented
	// PLEG consumes, with the pod's sandbox status.
	events := crictlEvents(t, crictl)

	// rm: an exited container goes from ps -a; the pod's worker keeps its
	// last status. A running one is refused by crictl itself, and with -f
	// stopped first; the worker restarts it (restartPolicy Always) as a new
	// container, its restart count 1 as the kubelet's with the old log kept
	// (-k: the kubelet counts a container it no longer finds from its log
	// files, and starts again at 0 without them; hostlet counts on).
	initID := strings.TrimPrefix(webPod.Status.InitContainerStatuses[0].ContainerID, "containerd://")
	if out := run("rm", initID[:13]); strings.TrimSpace(out) != initID[:13] {
		t.Errorf("crictl rm: %q", out)
	}
	if _, err := node.Crictl(ctxT(t), crictl, "inspect", initID); err == nil {
		t.Errorf("crictl inspect of a removed container: no error")
	}
	if _, err := node.Crictl(ctxT(t), crictl, "rm", talkID); err == nil || !strings.Contains(err.Error(), "please stop it first") {
		t.Errorf("crictl rm of a running container: %v", err)
	}
	run("rm", "-f", "-k", talkID)
	restarted := waitFor(t, ns, "talk", time.Minute, "restarted after crictl rm -f", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Running != nil && cs[0].ContainerID != "containerd://"+talkID
	})
	if cs := restarted.Status.ContainerStatuses[0]; cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil ||
		cs.LastTerminationState.Terminated.ContainerID != "containerd://"+talkID || cs.LastTerminationState.Terminated.ExitCode != 137 {
		t.Errorf("talk after crictl rm -f: %+v", cs)
	}
	newTalkID := strings.TrimPrefix(restarted.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if got := mustGet(t, ns, "web"); got.Status.Phase != v1.PodRunning || got.Status.InitContainerStatuses[0].State.Terminated == nil ||
		got.Status.InitContainerStatuses[0].ContainerID != "containerd://"+initID {
		t.Errorf("web after crictl rm of its init container: %+v", got.Status)
	}
	for _, w := range []struct {
		id  string
		typ criapi.ContainerEventType
	}{
		{initID, criapi.ContainerEventType_CONTAINER_DELETED_EVENT},
		{talkID, criapi.ContainerEventType_CONTAINER_STOPPED_EVENT},
		{talkID, criapi.ContainerEventType_CONTAINER_DELETED_EVENT},
		{newTalkID, criapi.ContainerEventType_CONTAINER_CREATED_EVENT},
		{newTalkID, criapi.ContainerEventType_CONTAINER_STARTED_EVENT},
	} {
		e := events.wait(t, w.id, w.typ)
		if uid := e.PodSandboxStatus.GetMetadata().GetUid(); w.id != initID && uid != string(talkPod.UID) || w.id == initID && uid != string(webPod.UID) {
			t.Errorf("event %s of %s: sandbox %v", w.typ, w.id, e.PodSandboxStatus)
		}
	}
	// ReopenContainerLog (the kubelet's log manager's call after renaming
	// a live log; crictl has no command for it): what the container writes
	// next goes to a new file at its log path.
	var newTalk criapi.ContainerStatus
	decodeStatus(t, run("inspect", "-o", "json", newTalkID), &newTalk)
	if err := os.Rename(newTalk.LogPath, newTalk.LogPath+".renamed"); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+node.CRISocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := criapi.NewRuntimeServiceClient(conn).ReopenContainerLog(ctxT(t), &criapi.ReopenContainerLogRequest{ContainerId: newTalkID}); err != nil {
		t.Errorf("ReopenContainerLog: %v", err)
	}
	if err := crictlAttach(t, crictl, newTalkID, "again\n", "got again"); err != nil {
		t.Errorf("crictl attach: %v", err)
	}
	pollUntil(t, 10*time.Second, "the line in the reopened log", func() bool {
		b, _ := os.ReadFile(newTalk.LogPath)
		return strings.Contains(string(b), "got again")
	})
	if b, _ := os.ReadFile(newTalk.LogPath + ".renamed"); strings.Contains(string(b), "got again") {
		t.Errorf("the renamed log got the line after the reopen: %q", b)
	}
	if _, err := criapi.NewRuntimeServiceClient(conn).ReopenContainerLog(ctxT(t), &criapi.ReopenContainerLogRequest{ContainerId: talkID}); grpcstatus.Code(err) != codes.NotFound {
		t.Errorf("ReopenContainerLog of a removed container: %v", err)
	}

	// A pod's whole life: its sandbox made, its container, then deleted:
	// the container stopped and removed, the sandbox stopped and deleted.
	brief := busybox(ns, "brief", "sleep", "3600")
	brief.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	cluster.CreatePod(t, brief)
	briefPod := waitPhase(t, ns, "brief", v1.PodRunning)
	var briefPods criapi.ListPodSandboxResponse
	decode(t, run("pods", "--label", "io.kubernetes.pod.uid="+string(briefPod.UID), "-o", "json"), &briefPods)
	if len(briefPods.Items) != 1 {
		t.Fatalf("crictl pods of brief: %v", briefPods.Items)
	}
	briefSandbox := briefPods.Items[0].Id
	briefID := strings.TrimPrefix(briefPod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	for _, typ := range []criapi.ContainerEventType{criapi.ContainerEventType_CONTAINER_CREATED_EVENT, criapi.ContainerEventType_CONTAINER_STARTED_EVENT} {
		if e := events.wait(t, briefSandbox, typ); e.PodSandboxStatus.GetState() != criapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("sandbox event %s: %v", typ, e.PodSandboxStatus)
		}
		events.wait(t, briefID, typ)
	}
	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), "brief", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	events.wait(t, briefID, criapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	events.wait(t, briefID, criapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	if e := events.wait(t, briefSandbox, criapi.ContainerEventType_CONTAINER_STOPPED_EVENT); e.PodSandboxStatus.GetState() != criapi.PodSandboxState_SANDBOX_NOTREADY ||
		e.PodSandboxStatus.GetMetadata().GetUid() != string(briefPod.UID) {
		t.Errorf("sandbox stopped: %v", e.PodSandboxStatus)
	}
	events.wait(t, briefSandbox, criapi.ContainerEventType_CONTAINER_DELETED_EVENT)

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
	// Removed once exited, the pod keeps its status.
	run("rm", runningID)
	time.Sleep(time.Second)
	if got := mustGet(t, ns, "web"); got.Status.Phase != v1.PodFailed || got.Status.ContainerStatuses[0].State.Terminated == nil ||
		got.Status.ContainerStatuses[0].State.Terminated.ExitCode != 137 {
		t.Errorf("web after crictl rm: %+v", got.Status)
	}

	// pull into hostlet's namespace with the request's credentials (an
	// image of its own: rmi takes every name of an image), the image's ID
	// back; rmi removes it.
	reg := privateRegistry(t, &images.BasicAuth{User: "puller", Password: "pw"})
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Addr() + "/cri/random:v1"
	if err := remote.Write(mustRef(t, ref), img, remote.WithAuth(&authn.Basic{Username: "puller", Password: "pw"})); err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Crictl(ctxT(t), crictl, "pull", ref); err == nil {
		t.Errorf("crictl pull without credentials: no error")
	}
	if out := run("pull", "--creds", "puller:pw", ref); strings.TrimSpace(out) != "Image is up to date for "+cfg.String() {
		t.Errorf("crictl pull: %q, want the ID %s", out, cfg)
	}
	var pulled struct{ Status struct{ ID string } }
	if err := json.Unmarshal([]byte(run("inspecti", "-o", "json", ref)), &pulled); err != nil || pulled.Status.ID != cfg.String() {
		t.Errorf("crictl inspecti: %+v %v", pulled, err)
	}
	run("rmi", ref)
	if out, err := node.Crictl(ctxT(t), crictl, "inspecti", ref); err == nil {
		t.Errorf("crictl inspecti after rmi: %s", out)
	}
	if !strings.Contains(run("images"), strings.Split(images.BusyboxRef, ":")[0]) {
		t.Errorf("crictl rmi took other images")
	}
}

func mustGet(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustRef(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// crictlStdin runs crictl with stdin, returning its stdout.
func crictlStdin(t *testing.T, crictl, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := node.CrictlCommand(ctxT(t), crictl, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// crictlForward runs crictl port-forward to the sandbox's port from a
// local port of crictl's choosing and GETs path through it.
func crictlForward(t *testing.T, crictl, sandbox string, port int, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	cmd := node.CrictlCommand(ctx, crictl, "port-forward", sandbox, ":"+strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	// "Forwarding from 127.0.0.1:<local> -> <port>"
	local := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> `)
	sc := bufio.NewScanner(out)
	var addr string
	for addr == "" && sc.Scan() {
		if m := local.FindStringSubmatch(sc.Text()); m != nil {
			addr = "127.0.0.1:" + m[1]
		}
	}
	if addr == "" {
		return "", errors.New("crictl port-forward did not listen")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %q", resp.StatusCode, b)
	}
	return string(b), err
}

// crictlAttach attaches to the container with stdin, writes input and
// waits for want in its output.
func crictlAttach(t *testing.T, crictl, id, input, want string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	cmd := node.CrictlCommand(ctx, crictl, "attach", "-i", id)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	if _, err := io.WriteString(in, input); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		if sc.Text() == want {
			return nil
		}
		seen = append(seen, sc.Text())
	}
	return fmt.Errorf("no %q in %q", want, seen)
}

// criEvents are what crictl events streams, kept as they come.
type criEvents struct {
	mu   sync.Mutex
	seen []*criapi.ContainerEventResponse
}

// crictlEvents runs crictl events until the test ends.
func crictlEvents(t *testing.T, crictl string) *criEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	cmd := node.CrictlCommand(ctx, crictl, "events")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	ev := &criEvents{}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var raw json.RawMessage
			if dec.Decode(&raw) != nil {
				return
			}
			var e criapi.ContainerEventResponse
			if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &e) != nil {
				continue
			}
			ev.mu.Lock()
			ev.seen = append(ev.seen, &e)
			ev.mu.Unlock()
		}
	}()
	// The stream is up once crictl asked; nothing says so but time.
	time.Sleep(time.Second)
	return ev
}

// wait is the event of that type for that container, once seen.
func (ev *criEvents) wait(t *testing.T, id string, typ criapi.ContainerEventType) *criapi.ContainerEventResponse {
	t.Helper()
	var found *criapi.ContainerEventResponse
	pollUntil(t, 30*time.Second, fmt.Sprintf("event %s of %s", typ, id), func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, e := range ev.seen {
			if e.ContainerId == id && e.ContainerEventType == typ {
				found = e
				return true
			}
		}
		return false
	})
	return found
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
