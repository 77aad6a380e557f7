package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The network namespaces a kill of hostlet left before any sandbox record
// named them go at the next start; those a record names stay, an
// incomplete record's too (its teardown runs the CNI DEL in it).
func TestRemoveUnrecordedNetNS(t *testing.T) {
	r := &Runtime{rootDir: t.TempDir()}
	dir := filepath.Join(r.rootDir, "netns")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	record := func(uid string, s *Sandbox) {
		t.Helper()
		s.UID, s.Dir = uid, r.podDir(uid)
		if err := os.MkdirAll(s.Dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := s.save(); err != nil {
			t.Fatal(err)
		}
	}
	// Killed between the file's creation and its mount: a plain file.
	bare := filepath.Join(dir, "cni-bare")
	kept := filepath.Join(dir, "cni-kept")
	for _, p := range []string{bare, kept} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	record("a", &Sandbox{NetNSPath: kept, Incomplete: true})
	record("host", &Sandbox{HostNetwork: true})
	if err := os.MkdirAll(r.podDir("torn"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.podDir("torn"), "sandbox.json"), []byte("{"), 0o640); err != nil {
		t.Fatal(err)
	}

	var mounted, recordedMount string
	if os.Geteuid() == 0 {
		for _, p := range []*string{&mounted, &recordedMount} {
			ns, err := netns.NewNetNS(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ns.Remove() })
			*p = ns.GetPath()
		}
		record("b", &Sandbox{NetNSPath: recordedMount, IPs: []string{"10.0.0.2"}})
	}

	if err := r.removeUnrecordedNetNS(); err != nil {
		t.Fatal(err)
	}
	gone := []string{bare}
	stays := []string{kept}
	if mounted != "" {
		gone, stays = append(gone, mounted), append(stays, recordedMount)
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s no record names is still there: %v", p, err)
		}
	}
	for _, p := range stays {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s a record names was removed: %v", p, err)
		}
	}
	if recordedMount != "" && !isMountPoint(recordedMount) {
		t.Errorf("the recorded namespace %s was unmounted", recordedMount)
	}
}

// A container is this hostlet's when it logs under its pod logs dir: a
// created one logging elsewhere is another node's, in the making.
func TestOwnsLog(t *testing.T) {
	r := &Runtime{rootDir: "/var/lib/hostlet", podLogsDir: "/var/log/pods"}
	for path, want := range map[string]bool{
		"/var/log/pods/ns_p_uid/c/0.log":            true,
		"/var/lib/hostlet/logs/ns_p_uid/c/0.log":    true,
		"/var/log/pods-other/ns_p_uid/c/0.log":      false,
		"/tmp/other-node/pods/ns_p_uid/c/0.log":     false,
		"":                                          false,
		"/var/log/pods":                             false,
		"/var/lib/hostlet/logsx/ns_p_uid/c/0.log":   false,
		"/var/lib/hostlet/pods/uid/containers/c/id": false,
	} {
		if got := r.ownsLog(path); got != want {
			t.Errorf("ownsLog(%q) = %v, want %v", path, got, want)
		}
	}
}

// A start containerd's going away interrupted is not the process's
// failure: its errors, wrapped as newTask wraps them, read as the
// connection lost; the shim's or runc's answers do not.
func TestRuntimeLost(t *testing.T) {
	for err, want := range map[error]bool{
		startError(status.Error(codes.Unavailable, "error reading from server: EOF")):                           true,
		startError(fmt.Errorf("connection error: %w", errdefs.ErrUnavailable)):                                  true,
		startError(errors.New("OCI runtime create failed: exec: \"nope\": executable file not found")):          false,
		status.Error(codes.NotFound, "container not found"):                                                     false,
		status.Error(codes.Internal, "server closed the stream without sending trailers"):                       true,
		fmt.Errorf("creating container: %v", status.Error(codes.Unavailable, "error reading from server: EOF")): true,
	} {
		if got := runtimeLost(err); got != want {
			t.Errorf("runtimeLost(%v) = %v, want %v", err, got, want)
		}
	}
}

// A container's cgroup directory from its spec's cgroupsPath, in either
// driver's form, as runc makes it.
func TestContainerCgroupDir(t *testing.T) {
	for in, want := range map[string]string{
		"/kubepods/besteffort/podu/abc":                     "/kubepods/besteffort/podu/abc",
		"kubepods/podu/abc":                                 "/kubepods/podu/abc",
		"kubepods-besteffort-podu.slice:cri-containerd:abc": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice/cri-containerd-abc.scope",
		":cri-containerd:abc":                               "/system.slice/cri-containerd-abc.scope",
		"kubepods.slice::abc":                               "/kubepods.slice/abc.scope",
		"":                                                  "",
		"kubepods.slice:cri-containerd:":                    "",
	} {
		if got := containerCgroupDir(in); got != want {
			t.Errorf("containerCgroupDir(%q) = %q, want %q", in, got, want)
		}
	}
}

// A shim is known by its command line: the namespace and containerd it
// was started for, and the container whose id it was given.
func TestShimFor(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		id     string
		wanted bool
	}{
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "hostlet", "-id", "abc", "-address", "/run/c.sock"}, "abc", true},
		{[]string{"containerd-shim-runsc-v1", "--namespace", "hostlet", "--address", "/run/c.sock", "--id", "x"}, "x", true},
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/run/c.sock"}, "", false},
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "hostlet", "-id", "abc", "-address", "/other.sock"}, "", false},
		{[]string{"/bin/sh", "-namespace", "hostlet", "-id", "abc", "-address", "/run/c.sock"}, "", false},
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "hostlet", "-address", "/run/c.sock"}, "", false},
		{nil, "", false},
	} {
		id, ok := shimFor(tc.argv, "hostlet", "/run/c.sock")
		if id != tc.id || ok != tc.wanted {
			t.Errorf("shimFor(%q) = %q, %v; want %q, %v", tc.argv, id, ok, tc.id, tc.wanted)
		}
	}
}
