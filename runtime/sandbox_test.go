package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/pkg/netns"
)

// A sandbox is whole or it is not ready: a record saved before the CNI
// ADD (hostlet killed in the middle of it), a pod without an IP, a shared
// file or /dev/shm missing are ErrSandboxNotReady, never a sandbox its
// containers would start in and fail at every start; no record at all is
// fs.ErrNotExist.
func TestSandboxWhole(t *testing.T) {
	r := &Runtime{rootDir: t.TempDir()}
	save := func(uid string, s *Sandbox, files ...string) {
		t.Helper()
		s.UID, s.Dir = uid, r.podDir(uid)
		if err := os.MkdirAll(s.Dir, 0o750); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(s.Dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.save(); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"etc-hosts", "resolv.conf", "etc-hostname"}
	save("whole", &Sandbox{HostNetwork: true, HostIPC: true, IPs: []string{"127.0.0.1"}}, all...)
	if _, err := r.Sandbox("whole"); err != nil {
		t.Fatalf("a whole sandbox: %v", err)
	}
	if _, err := r.Sandbox("none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no sandbox: %v, want fs.ErrNotExist", err)
	}
	for name, tc := range map[string]struct {
		s     *Sandbox
		files []string
	}{
		"interrupted":    {&Sandbox{HostNetwork: true, HostIPC: true, Incomplete: true}, all},
		"no hosts file":  {&Sandbox{HostNetwork: true, HostIPC: true}, all[1:]},
		"no resolv.conf": {&Sandbox{HostNetwork: true, HostIPC: true}, []string{"etc-hosts", "etc-hostname"}},
		"no /dev/shm":    {&Sandbox{HostNetwork: true}, all},
		"no netns":       {&Sandbox{NetNSPath: filepath.Join(r.rootDir, "gone"), IPs: []string{"10.0.0.2"}, HostIPC: true}, all},
	} {
		save(name, tc.s, tc.files...)
		if _, err := r.Sandbox(name); !errors.Is(err, ErrSandboxNotReady) {
			t.Errorf("%s: %v, want ErrSandboxNotReady", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.podDir("whole"), "sandbox.json"), []byte("{"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Sandbox("whole"); !errors.Is(err, ErrSandboxNotReady) {
		t.Errorf("a torn record: %v, want ErrSandboxNotReady", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root")
	}
	ns, err := netns.NewNetNS(filepath.Join(r.rootDir, "netns"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Remove()
	save("no-ip", &Sandbox{NetNSPath: ns.GetPath(), HostIPC: true}, all...)
	if _, err := r.Sandbox("no-ip"); !errors.Is(err, ErrSandboxNotReady) {
		t.Errorf("a pod network sandbox without an IP: %v, want ErrSandboxNotReady", err)
	}
	save("with-ip", &Sandbox{NetNSPath: ns.GetPath(), HostIPC: true, IPs: []string{"10.0.0.2"}}, all...)
	if _, err := r.Sandbox("with-ip"); err != nil {
		t.Errorf("a pod network sandbox with its IP: %v", err)
	}
}
