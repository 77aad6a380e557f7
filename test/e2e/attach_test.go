package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// syncBuffer collects a session's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sizeQueue hands the client's terminal sizes to remotecommand.
type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// attachSession is one attach through the API server's pods/attach, as
// kubectl makes it.
type attachSession struct {
	stdin  *io.PipeWriter
	out    *syncBuffer
	errOut *syncBuffer
	sizes  sizeQueue
	done   chan error
}

// attach starts a session with stdin and stdout (and stderr without a
// TTY) over SPDY or, with websocket, over the websocket protocol the API
// server translates for the node.
func attach(t *testing.T, ns, pod string, tty, websocket bool) *attachSession {
	t.Helper()
	cfg := cluster.RESTConfig()
	req := cluster.Client().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("attach").
		VersionedParams(&v1.PodAttachOptions{Container: "c", Stdin: true, Stdout: true, Stderr: !tty, TTY: tty}, scheme.ParameterCodec)
	var executor remotecommand.Executor
	var err error
	if websocket {
		executor, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	} else {
		executor, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	}
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	s := &attachSession{stdin: pw, out: &syncBuffer{}, errOut: &syncBuffer{}, sizes: make(sizeQueue, 4), done: make(chan error, 1)}
	opts := remotecommand.StreamOptions{Stdin: pr, Stdout: s.out, Tty: tty}
	if tty {
		opts.TerminalSizeQueue = s.sizes
	} else {
		opts.Stderr = s.errOut
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		close(s.sizes)
	})
	go func() { s.done <- executor.StreamWithContext(ctx, opts) }()
	return s
}

func (s *attachSession) send(t *testing.T, text string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, text); err != nil {
		t.Fatalf("writing to the session: %v", err)
	}
}

// waitOutput waits until the session's output contains want; retry, when
// set, is sent again now and then (a shell may get input before the
// terminal's new size).
func (s *attachSession) waitOutput(t *testing.T, want, retry string) {
	t.Helper()
	for n := 0; !strings.Contains(s.out.String(), want); n++ {
		if n == 300 {
			t.Fatalf("timed out waiting for attach output %q; the session got %q", want, s.out.String())
		}
		if retry != "" && n%10 == 0 {
			_, _ = io.WriteString(s.stdin, retry)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// end closes the session's stdin and waits for the session to end.
func (s *attachSession) end(t *testing.T) {
	t.Helper()
	_ = s.stdin.Close()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("attach session: %v (output %q)", err, s.out.String())
		}
	case <-ctxT(t).Done():
		t.Fatalf("attach session did not end (output %q)", s.out.String())
	}
}

// waitServing waits until a restarted node serves the pod's logs: Ready
// does not say the node has its pods back (nor does it on the kubelet,
// whose server also starts before its pod manager fills).
func waitServing(t *testing.T, ns, pod string) {
	t.Helper()
	pollUntil(t, time.Minute, "the restarted node serving "+pod, func() bool {
		_, err := cluster.Client().CoreV1().Pods(ns).GetLogs(pod, &v1.PodLogOptions{}).DoRaw(ctxT(t))
		return err == nil
	})
}

func interactivePod(ns, name string, tty, once bool, cmd ...string) *v1.Pod {
	p := busybox(ns, name, cmd...)
	c := &p.Spec.Containers[0]
	c.Stdin, c.StdinOnce, c.TTY = true, once, tty
	return p
}

// A shell with a terminal: input reaches it over SPDY and over websocket,
// also after a restart of hostlet, the terminal takes the client's sizes, and the log holds the terminal's
// output as stdout lines without their closing carriage return.
func TestAttachTTY(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, interactivePod(ns, "shell", true, false, "sh"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	// The third session is to a container hostlet adopted after a restart.
	for i, websocket := range []bool{false, true, false} {
		if i == 2 {
			if err := node.Restart(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			waitServing(t, ns, pod.Name)
		}
		s := attach(t, ns, pod.Name, true, websocket)
		s.send(t, "echo tty-$(tty | cut -c1-8)\n")
		s.waitOutput(t, "tty-/dev/pts", "")
		rows, cols := 24+i, 80+i*10
		s.sizes <- remotecommand.TerminalSize{Width: uint16(cols), Height: uint16(rows)}
		s.waitOutput(t, "size-"+strconv.Itoa(rows)+"-"+strconv.Itoa(cols), "echo size-$(stty size | tr ' ' -)\n")
		s.sizes <- remotecommand.TerminalSize{Width: 132, Height: 50}
		s.waitOutput(t, "size-50-132", "echo size-$(stty size | tr ' ' -)\n")
		s.end(t)
	}
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
		t.Fatalf("the shell did not outlive its sessions: %v %v", p.Status.Phase, err)
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
	if err != nil || !strings.Contains(out, "\nsize-50-132\n") || strings.Contains(out, "\r\n") {
		t.Fatalf("kubectl logs = %q, %v", out, err)
	}
	logFile := filepath.Join(node.PodLogsDir(), ns+"_"+pod.Name+"_"+string(pod.UID), "c", "0.log")
	b, err := os.ReadFile(logFile)
	if err != nil || bytes.Contains(b, []byte(" stderr ")) || !bytes.Contains(b, []byte(" stdout F size-50-132\n")) {
		t.Fatalf("CRI log %s = %q, %v", logFile, b, err)
	}
}

// Without a terminal: stdin reaches cat, its output comes back and is in
// the log; the session ending leaves cat running with its stdin open.
func TestAttachStdin(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, interactivePod(ns, "cat", false, false, "sh", "-c", "echo started >&2; cat"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	for _, websocket := range []bool{false, true} {
		s := attach(t, ns, pod.Name, false, websocket)
		word := "hello-spdy"
		if websocket {
			word = "hello-websocket"
		}
		s.send(t, word+"\n")
		s.waitOutput(t, word+"\n", "")
		s.end(t)
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
	if err != nil || out != "started\nhello-spdy\nhello-websocket\n" {
		t.Fatalf("kubectl logs = %q, %v", out, err)
	}
	if p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodRunning {
		t.Fatalf("cat did not keep its stdin open: %v %v", p.Status.Phase, err)
	}
	// stdin and logs still work for a container hostlet adopted.
	if err := node.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitServing(t, ns, pod.Name)
	s := attach(t, ns, pod.Name, false, false)
	s.send(t, "after-restart\n")
	s.waitOutput(t, "after-restart\n", "")
	s.end(t)
	pollUntil(t, time.Minute, "the adopted container's output in its log", func() bool {
		out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
		return err == nil && strings.HasSuffix(out, "hello-websocket\nafter-restart\n")
	})
}

// stdinOnce: the end of the first session closes the container's stdin;
// cat sees EOF and the pod succeeds; the session sees the output up to the
// exit.
func TestAttachStdinOnce(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, interactivePod(ns, "once", false, true, "sh", "-c", "cat; echo cat-done"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	s := attach(t, ns, pod.Name, false, false)
	s.send(t, "only-once\n")
	s.waitOutput(t, "only-once\n", "")
	s.end(t)
	if got := s.out.String(); got != "only-once\ncat-done\n" {
		t.Errorf("session output %q", got)
	}
	done := waitPhase(t, ns, pod.Name, v1.PodSucceeded)
	if term := done.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
		t.Fatalf("terminated state %+v", term)
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
	if err != nil || out != "only-once\ncat-done\n" {
		t.Fatalf("kubectl logs = %q, %v", out, err)
	}
}

// kubectl run -it --rm, in a terminal script(1) gives kubectl: the shell
// gets the typed line, and the pod is gone after the session.
func TestAttachKubectlRun(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	overrides := `{"spec":{"nodeName":"` + nodeName + `"}}`
	cmd, stdin, out := kubectlTTY(t, "-n "+ns+" run runner -it --rm --restart=Never --image=hostlet.local/busybox:1.35 --overrides='"+overrides+"' -- sh")
	waitShell(t, stdin, out, "kubectl run -it", "ran")
	_, _ = io.WriteString(stdin, "exit 0\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kubectl run -it: %v (%q)", err, out.String())
	}
	waitGone(t, ns, "runner")
}

// The kubelet API's attach, in the short and the uid form, needs
// nodes/proxy as exec does; a wrong UID finds no pod.
func TestAttachKubeletAPI(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, interactivePod(ns, "target", false, false, "cat"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	_, proxy := kubeletIdentity(t, ns, "proxy", "create", "get")
	_, stats := kubeletIdentity(t, ns, "stats", "create", "get")
	short := "/attach/" + ns + "/target/c?output=1"
	withUID := "/attach/" + ns + "/target/" + string(pod.UID) + "/c?output=1"
	// Without the upgrade headers the streaming server refuses with 400:
	// the request got past authorization to the attach handler.
	for _, path := range []string{short, withUID} {
		if code, body := kubeletCall(t, "POST", path, proxy); code != 400 {
			t.Errorf("POST %s with nodes/proxy = %d %q", path, code, body)
		}
		if code, body := kubeletCall(t, "POST", path, stats); code != 403 {
			t.Errorf("POST %s with nodes/stats = %d %q", path, code, body)
		}
	}
	wrong := "/attach/" + ns + "/target/00000000-0000-0000-0000-000000000000/c?output=1"
	if code, body := kubeletCall(t, "POST", wrong, proxy); code != 404 {
		t.Errorf("POST %s = %d %q", wrong, code, body)
	}
}

// kubectlTTY starts kubectl with args (shell words) under script(1), so it
// has a terminal as a user's would; out collects what the terminal shows.
func kubectlTTY(t *testing.T, args string) (*exec.Cmd, io.Writer, *syncBuffer) {
	t.Helper()
	kubectl := filepath.Join(cluster.BinDir(), "kubectl") + " --kubeconfig " + cluster.KubeconfigPath()
	cmd := exec.CommandContext(ctxT(t), "script", "-qec", kubectl+" "+args, "/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, out
}

// waitShell types until the shell behind a kubectlTTY session answers
// (kubectl attaches only once the container runs): it echoes tag-$((40+1))
// and waits for the expanded tag-41, which only the shell can print.
func waitShell(t *testing.T, stdin io.Writer, out *syncBuffer, what, tag string) {
	t.Helper()
	want := tag + "-41"
	pollUntil(t, 2*time.Minute, "the shell in "+what+" to answer", func() bool {
		if strings.Contains(out.String(), want) {
			return true
		}
		_, _ = io.WriteString(stdin, "echo "+tag+"-$((40+1))\n")
		time.Sleep(time.Second)
		return strings.Contains(out.String(), want)
	})
}
