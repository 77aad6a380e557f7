package runtime

import (
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/containerd/containerd/v2/pkg/netns"
	cnins "github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// newPodNamespaces leaves what the netns package and pinIPCUTS left: a
// pinned network namespace named as containerd names them, with lo up, and
// the UTS (with the pod's hostname) and IPC ones at their fixed places; a
// hostIPC pod gets no IPC one. All released by what RemoveSandbox calls.
func TestNewPodNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces")
	}
	for _, ipc := range []bool{true, false} {
		nsDir, dir := t.TempDir(), t.TempDir()
		netPath, ipcPath, utsPath, err := newPodNamespaces(nsDir, dir, "pod-host", ipc)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Match(filepath.Join(nsDir, "cni-*-*-*-*-*"), netPath); !m {
			t.Errorf("netns path %s", netPath)
		}
		if utsPath != filepath.Join(dir, "uts") || !nsPinned(utsPath) {
			t.Errorf("uts %s not pinned", utsPath)
		}
		if ipc != (ipcPath != "") || ipc && (ipcPath != filepath.Join(dir, "ipc") || !nsPinned(ipcPath)) {
			t.Errorf("ipc=%v: ipc path %q", ipc, ipcPath)
		}
		if !ipc {
			if _, err := os.Stat(filepath.Join(dir, "ipc")); !os.IsNotExist(err) {
				t.Errorf("hostIPC pod got an ipc file (%v)", err)
			}
		}
		ns := netns.LoadNetNS(netPath)
		if closed, err := ns.Closed(); err != nil || closed {
			t.Fatalf("netns closed=%v err=%v", closed, err)
		}
		if err := ns.Do(func(cnins.NetNS) error {
			lo, err := net.InterfaceByName("lo")
			if err == nil && lo.Flags&net.FlagUp == 0 {
				t.Error("lo is down")
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got := hostnameIn(t, utsPath); got != "pod-host" {
			t.Errorf("hostname %q", got)
		}
		if err := ns.Remove(); err != nil {
			t.Error(err)
		}
		unpinNamespace(ipcPath)
		unpinNamespace(utsPath)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("left in the pod dir: %v", ents)
		}
	}
}

// hostnameIn reads the hostname of the UTS namespace pinned at path.
func hostnameIn(t *testing.T, path string) string {
	t.Helper()
	out := make(chan string, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread is discarded
		f, err := os.Open(path)
		if err != nil {
			out <- err.Error()
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS); err != nil {
			out <- err.Error()
			return
		}
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			out <- err.Error()
			return
		}
		out <- unix.ByteSliceToString(u.Nodename[:])
	}()
	return <-out
}
