package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A spec's mounts as the kubelet gave CRI them: volumes first, then
// /etc/hosts and the termination message; none of those containerd's CRI
// adds itself, nor the non-bind ones.
func TestCRIMounts(t *testing.T) {
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"},
		bind("/pod/etc-hosts", "/etc/hosts", false),
		bind("/pod/resolv.conf", "/etc/resolv.conf", false),
		bind("/pod/etc-hostname", "/etc/hostname", false),
		bind("/pod/shm", "/dev/shm", false),
		bind("/pod/containers/app/abc-termination-log", "/dev/termination-log", false),
		{Destination: "/data", Type: "bind", Source: "/vol/data", Options: []string{"rbind", "rslave", "rro"}},
		{Destination: "/shared", Type: "bind", Source: "/vol/shared", Options: []string{"rbind", "rshared", "rw"}},
		bind("/vol/cfg", "/cfg", true),
	}
	got := criMounts(mounts, "/pod/containers/app/abc-termination-log")
	want := []Mount{
		{HostPath: "/vol/data", ContainerPath: "/data", ReadOnly: true, RecursiveReadOnly: true, Propagation: PropagationHostToContainer},
		{HostPath: "/vol/shared", ContainerPath: "/shared", Propagation: PropagationBidirectional},
		{HostPath: "/vol/cfg", ContainerPath: "/cfg", ReadOnly: true},
		{HostPath: "/pod/etc-hosts", ContainerPath: "/etc/hosts"},
		{HostPath: "/pod/containers/app/abc-termination-log", ContainerPath: "/dev/termination-log"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestImageUser(t *testing.T) {
	for user, want := range map[string]struct {
		uid  int64
		name string
	}{"": {-1, ""}, "0": {0, ""}, "1000:1000": {1000, ""}, "nobody": {-1, "nobody"}, "www-data:www-data": {-1, "www-data"}} {
		uid, name := imageUser(user)
		got := int64(-1)
		if uid != nil {
			got = *uid
		}
		if got != want.uid || name != want.name {
			t.Errorf("%q: %d %q, want %d %q", user, got, name, want.uid, want.name)
		}
	}
}

// A reopened log writer writes to a new file at its path once the old one
// was renamed away; the renamed file gets nothing more; a closed writer
// is not reopened.
func TestLogSinkReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	s, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(s.out, "before")
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := s.reopen(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(s.out, "after")
	s.close()
	old, _ := os.ReadFile(path + ".old")
	cur, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(old), " stdout F before\n") || !strings.HasSuffix(string(cur), " stdout F after\n") ||
		strings.Count(string(old)+string(cur), "\n") != 2 {
		t.Errorf("old %q, new %q", old, cur)
	}
	if err := s.reopen(); err == nil {
		t.Error("a closed writer reopened")
	}
}

// Sandbox events reach every watcher until it is removed; a watcher too
// far behind loses events rather than hold up the sandbox's making.
func TestSandboxWatchers(t *testing.T) {
	r := &Runtime{}
	a, ach := r.sandboxWatchers.add()
	_, bch := r.sandboxWatchers.add()
	r.sandboxEvent("uid1", ContainerStarted)
	for _, ch := range []<-chan ContainerEvent{ach, bch} {
		if e := <-ch; e.PodUID != "uid1" || e.Type != ContainerStarted || e.ID != "" || e.At.IsZero() {
			t.Errorf("event %+v", e)
		}
	}
	r.sandboxWatchers.remove(a)
	for range sandboxQueue + 1 {
		r.sandboxEvent("uid2", ContainerStopped)
	}
	if len(ach) != 0 || len(bch) != sandboxQueue {
		t.Errorf("queued %d (removed) and %d", len(ach), len(bch))
	}
}
