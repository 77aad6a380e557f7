package runtime

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// FuzzSpecFor drives random container configs through the OCI spec
// options: applying them never panics, every bind's source is one the
// config asked for (its mounts, the sandbox's files, the termination log,
// the host's /dev/shm only with hostIPC), and read-only mounts stay so.
// The seeds run as a unit test; `go test -fuzz FuzzSpecFor ./runtime`
// explores.
func FuzzSpecFor(f *testing.F) {
	f.Add("/var/lib/hostlet/pods/u/volumes/v", "/data", true, false, false, "", "NET_ADMIN", "ALL", "net.ipv4.ip_forward", "1", int64(1000), int64(64<<20), int64(100000), 2)
	f.Add("/", "/", false, true, true, "RuntimeDefault", "SYS_ADMIN", "", "kernel.shm_rmid_forced", "1", int64(0), int64(-1), int64(-5), -1000)
	f.Add("relative/../../x", "../etc", true, false, true, "Unconfined", "", "", "", "", int64(-1), int64(0), int64(0), 1000)
	f.Add("/x\x00y", "", false, false, false, "localhost", "CAP_bogus", "all", "a/b", "", int64(1<<40), int64(1<<62), int64(1<<62), 0)
	f.Fuzz(func(t *testing.T, src, dst string, ro, hostIPC, privileged bool, seccomp, capAdd, capDrop, sysctl, sysctlValue string,
		uid, mem, quota int64, oom int) {
		if seccomp != "" && seccomp != "RuntimeDefault" && seccomp != "Unconfined" {
			// A localhost profile is a file hostlet reads: keep it in the test dir.
			seccomp = filepath.Join(t.TempDir(), "profile.json")
		}
		sb := &Sandbox{UID: "u", Namespace: "ns", Name: "p", Dir: t.TempDir(), NetNSPath: "/run/netns/x", HostIPC: hostIPC}
		cfg := ContainerConfig{
			Sandbox: sb, Name: "c", Image: &Image{}, Env: []string{"A=b"},
			Mounts:                 []Mount{{HostPath: src, ContainerPath: dst, ReadOnly: ro}, {HostPath: sb.Dir, ContainerPath: "/ro", ReadOnly: true}},
			TerminationMessagePath: "/dev/termination-log",
			Security: Security{RunAsUser: &uid, Privileged: privileged, CapAdd: []string{capAdd}, CapDrop: []string{capDrop},
				Sysctls: map[string]string{sysctl: sysctlValue}, Seccomp: seccomp, ReadOnlyRootFS: ro},
			Resources: Resources{CPUShares: 2, CPUQuota: quota, CPUPeriod: 100000, MemoryLimit: mem, OOMScoreAdj: oom},
		}
		termLog := filepath.Join(sb.Dir, "termination-log")
		ctx := namespaces.WithNamespace(context.Background(), "fuzz")
		c := &containers.Container{ID: "fuzz"}
		spec, err := oci.GenerateSpec(ctx, nil, c)
		if err != nil {
			t.Fatal(err)
		}
		// The first option is the image's config (needs containerd); the
		// others are applied one by one, so an error in one does not hide
		// the mounts of the next.
		for _, opt := range specFor(cfg, []string{"sh"}, termLog, false)[1:] {
			_ = opt(ctx, nil, c, spec)
		}
		allowed := []string{src, sb.Dir, sb.HostsPath(), sb.ResolvConfPath(), sb.HostnamePath(), sb.ShmPath(), termLog}
		if hostIPC {
			allowed = append(allowed, "/dev/shm")
		}
		for _, m := range spec.Mounts {
			if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
				continue
			}
			if !slices.Contains(allowed, m.Source) && !(privileged && strings.HasPrefix(m.Source, "/dev/")) {
				t.Fatalf("bind of %q at %q: not asked for", m.Source, m.Destination)
			}
			matched, allRO := false, true
			for _, cm := range cfg.Mounts {
				if cm.HostPath == m.Source && cm.ContainerPath == m.Destination {
					matched, allRO = true, allRO && cm.ReadOnly
				}
			}
			if matched && allRO && !slices.Contains(m.Options, "ro") {
				t.Fatalf("read-only mount %q at %q has options %q", m.Source, m.Destination, m.Options)
			}
		}
	})
}
