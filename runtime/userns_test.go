package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func genSpec(t *testing.T, opts ...oci.SpecOpts) (*oci.Spec, error) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "test")
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: "c"}, opts...)
}

func TestProcMasksOnlyLiftedInUserNS(t *testing.T) {
	unmasked := Security{UnmaskedProc: true}
	for _, c := range []struct {
		name     string
		sec      Security
		userns   bool
		unmasked bool
	}{
		{"default", Security{}, false, false},
		{"default in userns", Security{}, true, false},
		{"Unmasked on the host's IDs", unmasked, false, false},
		{"Unmasked in userns", unmasked, true, true},
		{"privileged", Security{Privileged: true}, false, true},
	} {
		s, err := genSpec(t, securityOpts(c.sec, c.userns)...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		masked := slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") && slices.Contains(s.Linux.MaskedPaths, "/proc/acpi")
		ro := slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") && slices.Contains(s.Linux.ReadonlyPaths, "/proc/sysrq-trigger")
		if masked == c.unmasked || ro == c.unmasked {
			t.Errorf("%s: masked %v read-only %v, want unmasked %v (%v, %v)", c.name, masked, ro, c.unmasked, s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
		}
	}
}

func TestSeccompProfiles(t *testing.T) {
	s, err := genSpec(t, securityOpts(Security{Seccomp: ProfileRuntimeDefault}, false)...)
	if err != nil || s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Fatalf("RuntimeDefault: %v %+v", err, s.Linux.Seccomp)
	}
	for _, sec := range []Security{{}, {Seccomp: ProfileUnconfined}, {Seccomp: ProfileRuntimeDefault, Privileged: true}} {
		if s, err := genSpec(t, securityOpts(sec, false)...); err != nil || s.Linux.Seccomp != nil {
			t.Errorf("%+v: want no seccomp, got %v %+v", sec, err, s.Linux.Seccomp)
		}
	}
	dir := t.TempDir()
	profile := filepath.Join(dir, "audit.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_LOG"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := genSpec(t, securityOpts(Security{Seccomp: profile}, false)...); err != nil || s.Linux.Seccomp.DefaultAction != specs.ActLog {
		t.Errorf("Localhost: %v %+v", err, s.Linux.Seccomp)
	}
	_, err = genSpec(t, securityOpts(Security{Seccomp: filepath.Join(dir, "missing.json")}, false)...)
	if err == nil || !strings.Contains(err.Error(), `cannot load seccomp profile "`+dir+`/missing.json"`) {
		t.Errorf("missing Localhost profile: %v", err)
	}
}

func TestAppArmorOpt(t *testing.T) {
	for _, c := range []struct {
		profile string
		wantErr bool
	}{{"", false}, {ProfileUnconfined, false}, {ProfileRuntimeDefault, true}, {"k8s-deny", true}} {
		_, err := genSpec(t, appArmorOpt(c.profile, false, false))
		if (err != nil) != c.wantErr {
			t.Errorf("AppArmor %q on a host without it: %v", c.profile, err)
		}
	}
}

func TestUserNSSpec(t *testing.T) {
	m := IDMap{HostID: 3 * 65536, Size: 65536}
	sb := &Sandbox{Dir: "/pods/x", NetNSPath: "/netns/x", IPCNSPath: "/pods/x/ipc", UTSNSPath: "/pods/x/uts",
		UserNSPath: "/pods/x/user", IDMap: &m}
	s, err := genSpec(t, namespaceOpts(sb, "h")...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[specs.LinuxNamespaceType]string{specs.UserNamespace: "/pods/x/user", specs.NetworkNamespace: "/netns/x",
		specs.IPCNamespace: "/pods/x/ipc", specs.UTSNamespace: "/pods/x/uts", specs.PIDNamespace: "", specs.MountNamespace: ""}
	got := map[specs.LinuxNamespaceType]string{}
	for _, ns := range s.Linux.Namespaces {
		got[ns.Type] = ns.Path
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("namespace %s = %q (present %v), want %q", k, p, ok, v)
		}
	}
	wantMap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 3 * 65536, Size: 65536}}
	if !slices.Equal(s.Linux.UIDMappings, wantMap) || !slices.Equal(s.Linux.GIDMappings, wantMap) {
		t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	mounts := []specs.Mount{bind("/a", "/b", false), {Destination: "/proc", Type: "proc"}}
	idmapMounts(mounts, m)
	if !slices.Equal(mounts[0].UIDMappings, wantMap) || !slices.Equal(mounts[0].GIDMappings, wantMap) || mounts[1].UIDMappings != nil {
		t.Errorf("idmapped mounts: %+v", mounts)
	}
	if len(snapshotOpts(nil)) != 0 || len(snapshotOpts(&m)) != 1 {
		t.Errorf("snapshot options")
	}
}

// A host where the pod's user namespace cannot be made says so, for the
// sandbox error that refuses the pod.
func TestUserNSCheckRefuses(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{executable: filepath.Join(root, "missing"), rootDir: root}
	err := r.UserNamespacesSupported(context.Background())
	if !errors.Is(err, ErrUserNSUnsupported) || !strings.HasPrefix(err.Error(), "runtime does not support user namespaces: ") {
		t.Errorf("check: %v", err)
	}
	if again := r.UserNamespacesSupported(context.Background()); again != err {
		t.Errorf("checked twice: %v", again)
	}
}
