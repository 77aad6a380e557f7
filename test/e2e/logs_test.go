package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectlIn runs kubectl with stdin.
func kubectlIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), filepath.Join(cluster.BinDir(), "kubectl"), append([]string{"--kubeconfig", cluster.KubeconfigPath()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		t.Logf("kubectl %v stderr: %s", args, errb.String())
	}
	return out.String(), err
}

// kubectl logs options: --previous, --tail, --timestamps, --limit-bytes,
// --since and -f, as the kubelet serves them.
func TestLogsOptions(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	// Each run prints its restart count-independent marker, then exits so
	// the container restarts and --previous has something to show.
	pod := busybox(ns, "logger", "sh", "-c", "echo start $(cat /proc/sys/kernel/random/uuid); for i in 1 2 3 4 5; do echo line $i; done; sleep 0.5; echo err >&2; sleep 3; exit 1")
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	cluster.CreatePod(t, pod)
	_, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil, nil
	})
	if err != nil {
		t.Fatalf("never restarted: %v", err)
	}
	logs := func(args ...string) string {
		t.Helper()
		out, err := cluster.Kubectl(ctxT(t), append([]string{"-n", ns, "logs", pod.Name}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The current run may still be printing: wait for its last line.
	deadline := time.Now().Add(30 * time.Second)
	cur := logs()
	for !strings.HasSuffix(cur, "err\n") && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		cur = logs()
	}
	prev := logs("--previous")
	body := "line 1\nline 2\nline 3\nline 4\nline 5\nerr\n"
	if !strings.HasSuffix(prev, body) || !strings.HasPrefix(prev, "start ") {
		t.Errorf("--previous = %q", prev)
	}
	if !strings.HasSuffix(cur, body) || cur == prev {
		t.Errorf("current = %q (previous %q)", cur, prev)
	}
	if out := logs("--tail=2"); out != "line 5\nerr\n" {
		t.Errorf("--tail=2 = %q", out)
	}
	if out := logs("--tail=0"); out != "" {
		t.Errorf("--tail=0 = %q", out)
	}
	if out := logs("--limit-bytes=8"); out != cur[:8] {
		t.Errorf("--limit-bytes=8 = %q", out)
	}
	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line 5$`)
	if lines := strings.Split(logs("--timestamps", "--tail=2"), "\n"); !ts.MatchString(lines[0]) {
		t.Errorf("--timestamps line %q", lines[0])
	}
	if out := logs("--since=1h"); out != cur {
		t.Errorf("--since=1h = %q, want %q", out, cur)
	}
	time.Sleep(2 * time.Second)
	if out := logs("--since=1s"); strings.Contains(out, "line 1") {
		t.Errorf("--since=1s shows old lines: %q", out)
	}
}

// kubectl logs -f follows until the container exits.
func TestLogsFollow(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "follow", "sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done")
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", "-f", pod.Name)
	if err != nil || out != "tick 1\ntick 2\ntick 3\n" {
		t.Fatalf("logs -f = %q, %v", out, err)
	}
}

// kubectl exec with stdin (-i) and with a terminal (-it).
func TestExecInteractive(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, busybox(ns, "shell", "sleep", "3600"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	out, err := kubectlIn(t, "hello\nworld\n", "-n", ns, "exec", "-i", pod.Name, "--", "sh", "-c", "cat; echo done")
	if err != nil || out != "hello\nworld\ndone\n" {
		t.Errorf("exec -i = %q, %v", out, err)
	}
	// A real terminal for kubectl: script(1) gives it a pty.
	kubectl := filepath.Join(cluster.BinDir(), "kubectl") + " --kubeconfig " + cluster.KubeconfigPath()
	cmd := exec.CommandContext(ctxT(t), "script", "-qec", kubectl+" -n "+ns+" exec -it "+pod.Name+" -- sh -c 'tty; stty size; exit 4'", "/dev/null")
	cmd.Stdin = strings.NewReader("")
	b, err := cmd.CombinedOutput()
	text := strings.ReplaceAll(string(b), "\r", "")
	if !strings.Contains(text, "/dev/pts/") {
		t.Errorf("exec -it output %q: no terminal", text)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Errorf("exec -it exit: %v (%q)", err, text)
	}
}

// Logs sit where log collectors look on a kubelet node: each run of a
// container in <pod-logs-dir>/<namespace>_<name>_<uid>/<container>/
// <restartCount>.log, and per container instance a symlink
// <container-logs-dir>/<pod>_<namespace>_<container>-<id>.log to its
// file. Deleting the pod removes them all.
func TestLogsWhereCollectorsLook(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "logged", "sh", "-c", `n=$(cat /data/n 2>/dev/null || echo 0); echo run $n; echo $((n+1)) > /data/n
if [ $n -ge 1 ]; then exec sleep 3600; fi
exit 1`)
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	cluster.CreatePod(t, pod)
	p, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil && cs[0].LastTerminationState.Terminated != nil, nil
	})
	if err != nil {
		t.Fatalf("never on its second run: %v", err)
	}
	st := p.Status.ContainerStatuses[0]
	dir := filepath.Join(node.PodLogsDir(), ns+"_"+pod.Name+"_"+string(p.UID), "c")
	runs := map[string]string{ // container ID: its log file
		strings.TrimPrefix(st.LastTerminationState.Terminated.ContainerID, "containerd://"): filepath.Join(dir, "0.log"),
		strings.TrimPrefix(st.ContainerID, "containerd://"):                                 filepath.Join(dir, "1.log"),
	}
	var links []string
	for id, file := range runs {
		link := filepath.Join(node.ContainerLogsDir(), pod.Name+"_"+ns+"_c-"+id+".log")
		links = append(links, link)
		if target, err := os.Readlink(link); err != nil || target != file {
			t.Errorf("symlink %s -> %q (%v), want %s", link, target, err, file)
		}
		// The line may still be on its way through the shim's FIFO.
		want := "run " + strings.TrimSuffix(filepath.Base(file), ".log")
		pollUntil(t, 30*time.Second, want+" in "+link, func() bool {
			b, _ := os.ReadFile(link)
			return strings.Contains(string(b), " stdout F "+want+"\n")
		})
	}

	if err := cluster.Client().CoreV1().Pods(ns).Delete(ctxT(t), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	pollUntil(t, time.Minute, "the pod's logs and symlinks to be removed", func() bool {
		for _, f := range append(links, filepath.Dir(dir)) {
			if _, err := os.Lstat(f); err == nil {
				return false
			}
		}
		return true
	})
}
