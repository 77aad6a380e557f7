package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testLogRuntime(t *testing.T) *Runtime {
	base := t.TempDir()
	r := &Runtime{rootDir: filepath.Join(base, "root"), podLogsDir: filepath.Join(base, "pods"), containerLogsDir: filepath.Join(base, "containers")}
	for _, d := range []string{r.rootDir, r.podLogsDir, r.containerLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// Paths as the kubelet's: the file under the pod's directory, the symlink
// named for pod, namespace, container and ID, cut to ext4's name limit.
func TestLogPaths(t *testing.T) {
	r := testLogRuntime(t)
	if got, want := r.containerLogPath("ns", "web", "u1", "app", 2), filepath.Join(r.podLogsDir, "ns_web_u1", "app", "2.log"); got != want {
		t.Errorf("log path %s, want %s", got, want)
	}
	if got, want := r.logSymlink("ns", "web", "app", "abc123"), filepath.Join(r.containerLogsDir, "web_ns_app-abc123.log"); got != want {
		t.Errorf("symlink %s, want %s", got, want)
	}
	long := r.logSymlink("ns", strings.Repeat("n", 253), "app", "abc123")
	if b := filepath.Base(long); len(b) != maxLogNameLen || !strings.HasSuffix(b, ".log") {
		t.Errorf("long name %q (%d)", b, len(b))
	}
	// A pod whose logs were started under the root dir keeps them there.
	legacy := filepath.Join(r.rootDir, "logs", "ns_old_u2")
	if err := os.MkdirAll(legacy, 0o750); err != nil {
		t.Fatal(err)
	}
	if got := r.LogDir("ns", "old", "u2"); got != legacy {
		t.Errorf("legacy pod's log dir %s, want %s", got, legacy)
	}
}

// A started container's symlink points at its log file and goes with the
// container; RemoveLogs removes the pod's directory and the symlinks into
// it, and no other pod's.
func TestLogSymlinks(t *testing.T) {
	r := testLogRuntime(t)
	labels := func(ns, name, c string) map[string]string {
		return map[string]string{LabelPodNamespace: ns, LabelPodName: name, LabelContainerName: c,
			labelLogPath: r.containerLogPath(ns, name, "uid-"+name, c, 0)}
	}
	web, other := labels("ns", "web", "app"), labels("ns", "web2", "app")
	for _, l := range []map[string]string{web, other} {
		if err := os.MkdirAll(filepath.Dir(l[labelLogPath]), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l[labelLogPath], []byte("x\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	r.linkLog(web, "id1")
	r.linkLog(web, "id1") // a start retried after a crash replaces it
	r.linkLog(web, "id2")
	r.linkLog(other, "id3")
	link := r.logSymlink("ns", "web", "app", "id1")
	if target, err := os.Readlink(link); err != nil || target != web[labelLogPath] {
		t.Fatalf("symlink %s -> %s, %v", link, target, err)
	}
	r.unlinkLog(web, "id1")
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("symlink of a removed container: %v", err)
	}
	r.RemoveLogs("ns", "web", "uid-web")
	left, _ := filepath.Glob(filepath.Join(r.containerLogsDir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "web2_ns_app-id3.log" {
		t.Errorf("symlinks left %q, want web2's only", left)
	}
	if _, err := os.Stat(filepath.Join(r.podLogsDir, "ns_web_uid-web")); !os.IsNotExist(err) {
		t.Errorf("pod log dir: %v", err)
	}
}

// Dead symlinks into this node's pod logs (the log file gone) are removed,
// as the kubelet's container GC removes them; live ones, links into
// another node's logs, and files are left. A link whose name holds no
// whole container ID (cut at the name limit) is not looked up.
func TestRemoveDeadLogLinks(t *testing.T) {
	r := testLogRuntime(t)
	other := t.TempDir()
	live := filepath.Join(r.podLogsDir, "ns_web_u1", "app", "0.log")
	if err := os.MkdirAll(filepath.Dir(live), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		t.Helper()
		p := filepath.Join(r.containerLogsDir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keep := []string{
		link("web_ns_app-aaa.log", live),
		link("x_ns_app-bbb.log", filepath.Join(other, "ns_x_u3", "app", "0.log")),
	}
	dead := []string{
		link("gone_ns_app-ccc.log", filepath.Join(r.podLogsDir, "ns_gone_u2", "app", "0.log")),
		link("old_ns_app-ddd.log", filepath.Join(r.rootDir, "logs", "ns_old_u4", "app", "1.log")),
	}
	file := filepath.Join(r.containerLogsDir, "plain.log")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := r.RemoveDeadLogLinks(context.Background()); n != len(dead) {
		t.Errorf("removed %d links, want %d", n, len(dead))
	}
	for _, p := range append(keep, file) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	for _, p := range dead {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	id := strings.Repeat("ab", 32)
	if got := logLinkContainerID(r.logSymlink("ns", "web", "app", id)); got != id {
		t.Errorf("container ID %q, want %q", got, id)
	}
	if got := logLinkContainerID(r.logSymlink("ns", strings.Repeat("n", 200), "app", id)); got != "" {
		t.Errorf("container ID of a cut name %q, want none", got)
	}
}
