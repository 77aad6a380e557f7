package e2e

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
)

// consecutive checks that text is "line k ...", "line k+1 ...", ... up to
// "line last ..." with nothing missing or repeated, and returns k.
func consecutive(t *testing.T, what, text string, last int) int {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	first := -1
	for i, l := range lines {
		f := strings.Fields(l)
		n := -1
		if len(f) >= 2 && f[0] == "line" {
			n, _ = strconv.Atoi(f[1])
		}
		if i == 0 {
			first = n
		}
		if n < 0 || n != first+i {
			t.Fatalf("%s: line %d is %.40q, want line %d", what, i, l, first+i)
		}
	}
	if first+len(lines)-1 != last {
		t.Fatalf("%s: ends at line %d, want %d", what, first+len(lines)-1, last)
	}
	return first
}

// A chatty container's log rotates at the configured size as the kubelet
// rotates it (names, compression, retention); the log endpoint reads the
// live file, a follow goes on across rotations without losing or repeating
// a line, and --previous after a restart reads the rotated attempt.
func TestLogRotation(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-logrotate"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--container-log-max-size", "16Ki",
		"--container-log-max-files", "3",
		"--container-log-monitor-interval", "3s",
	}})
	ns := cluster.NewNamespace(t)
	// The first run prints lines 0..2999 (about 300 KiB over 15 s) and
	// fails; the second prints "second" and stays.
	const last = 2999
	pod := busybox(ns, "chatty", "sh", "-c", `if [ -e /data/ran ]; then echo second; exec sleep 3600; fi
touch /data/ran
pad=$(printf '%080d' 0)
i=0
while [ $i -le `+strconv.Itoa(last)+` ]; do
  case $i in [1-9]*00) sleep 0.5;; esac
  echo "line $i $pad"
  i=$((i+1))
done
exit 1`)
	pod.Spec.NodeName = name
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod = cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	followed := followLogs(t, ns, pod.Name)

	p, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil, nil
	})
	if err != nil {
		t.Fatalf("never restarted: %v", err)
	}

	// The follow ran from the first run's start to its exit, across every
	// rotation.
	select {
	case out := <-followed:
		consecutive(t, "logs -f", out, last)
	case <-time.After(time.Minute):
		t.Fatal("logs -f did not end with the container")
	}

	// The files of the first run: the live one, the newest rotated one as
	// is, the older compressed, max-files in all; together they are the
	// end of the output, in order.
	dir := filepath.Join(h.PodLogsDir(), ns+"_"+pod.Name+"_"+string(p.UID), "c")
	names, err := filepath.Glob(filepath.Join(dir, "0.log.*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	rotatedName := regexp.MustCompile(`^0\.log\.\d{8}-\d{6}(\.gz)?$`)
	if len(names) != 2 || !strings.HasSuffix(names[0], ".gz") || strings.HasSuffix(names[1], ".gz") {
		t.Fatalf("rotated files %q, want one compressed and one not", names)
	}
	var all strings.Builder
	for _, n := range append(names, filepath.Join(dir, "0.log")) {
		if !rotatedName.MatchString(filepath.Base(n)) && filepath.Base(n) != "0.log" {
			t.Errorf("rotated file named %s", filepath.Base(n))
		}
		all.WriteString(criContent(t, n))
	}
	if first := consecutive(t, "files", all.String(), last); first == 0 {
		t.Errorf("all of the output is still on disk: nothing was removed")
	}

	logs := func(opts v1.PodLogOptions) string {
		t.Helper()
		opts.Container = "c"
		b, err := cluster.Client().CoreV1().Pods(ns).GetLogs(pod.Name, &opts).DoRaw(ctxT(t))
		if err != nil {
			t.Fatalf("logs %+v: %v", opts, err)
		}
		return string(b)
	}
	// --previous reads the first run's live file: the end of its output.
	// A check that found the log past its size in the instant between the
	// last line and the exit rotated it (as the kubelet would): the live
	// file is then empty, and so is --previous.
	prev := logs(v1.PodLogOptions{Previous: true})
	if live := criContent(t, filepath.Join(dir, "0.log")); prev != live {
		t.Fatalf("--previous is not the first run's live file: %d bytes, the file %d", len(prev), len(live))
	} else if live == "" {
		t.Logf("the first run's log rotated as it exited: --previous is empty, as its live file")
		return
	}
	if first := consecutive(t, "--previous", prev, last); first == 0 {
		t.Errorf("--previous starts at line 0: the log never rotated")
	}
	tail := int64(3)
	if out := logs(v1.PodLogOptions{Previous: true, TailLines: &tail}); out != strings.Join(strings.SplitAfter(prev, "\n")[len(strings.SplitAfter(prev, "\n"))-4:], "") {
		t.Errorf("--previous --tail=3 = %q", out)
	}
	one := int64(1)
	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line 2999 0+\n$`)
	if out := logs(v1.PodLogOptions{Previous: true, TailLines: &one, Timestamps: true}); !ts.MatchString(out) {
		t.Errorf("--previous --tail=1 --timestamps = %q", out)
	}
	hour := int64(3600)
	if out := logs(v1.PodLogOptions{Previous: true, SinceSeconds: &hour}); out != prev {
		t.Errorf("--previous --since=1h differs from --previous")
	}
	out, err := cluster.Kubectl(ctxT(t), "-n", ns, "logs", pod.Name)
	if err != nil || out != "second\n" {
		t.Errorf("kubectl logs = %q, %v", out, err)
	}
}

// criContent is the content of a CRI log file, compressed or not.
func criContent(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out strings.Builder
	for _, rec := range strings.SplitAfter(string(b), "\n") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, " ", 4)
		if len(f) != 4 || f[2] != "F" {
			t.Fatalf("%s: record %.60q", path, rec)
		}
		out.WriteString(f[3])
	}
	return out.String()
}
