package podspec

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestUsernsAllocator(t *testing.T) {
	dir := t.TempDir()
	a := newUsernsAllocator(dir)
	seen := map[uint32]types.UID{}
	for _, uid := range []types.UID{"a", "b", "c"} {
		m, err := a.Get(uid)
		if err != nil {
			t.Fatal(err)
		}
		if m.Size != 65536 || m.HostID%65536 != 0 || m.HostID < 65536 {
			t.Fatalf("%s: mapping %+v: want a 65536-aligned block above the host's own IDs", uid, m)
		}
		if other, dup := seen[m.HostID]; dup {
			t.Fatalf("%s and %s share host ID %d", uid, other, m.HostID)
		}
		seen[m.HostID] = uid
		again, err := a.Get(uid)
		if err != nil || again != m {
			t.Fatalf("%s: second Get = %+v, %v; want %+v", uid, again, err, m)
		}
	}
	b, _ := a.Get("b")
	// The kubelet's file format in the pod dir.
	data, err := os.ReadFile(filepath.Join(dir, "b", "userns"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"uidMappings":[{"hostId":`) || !strings.Contains(string(data), `"containerId":0,"length":65536}]`) {
		t.Errorf("userns file = %s", data)
	}
	// Written whole (no temp file left in the pod dir), readable by the
	// node's group at most.
	if entries, _ := os.ReadDir(filepath.Join(dir, "b")); len(entries) != 1 {
		t.Errorf("pod dir holds %v, want the userns file only", entries)
	}
	if st, err := os.Stat(filepath.Join(dir, "b", "userns")); err != nil || st.Mode().Perm()&^0o640 != 0 {
		t.Errorf("userns file mode %v, err %v; want at most 0640", st.Mode().Perm(), err)
	}

	// A restart reads the allocations back and keeps them apart.
	r := newUsernsAllocator(dir)
	if got, err := r.Get("b"); err != nil || got != b {
		t.Errorf("after reload: b = %+v, %v; want %+v", got, err, b)
	}
	d, err := r.Get("d")
	if err != nil {
		t.Fatal(err)
	}
	if _, dup := seen[d.HostID]; dup {
		t.Errorf("after reload d got %d, already used", d.HostID)
	}

	// Release frees the block and the file.
	r.Release("b")
	if _, err := os.Stat(filepath.Join(dir, "b", "userns")); !os.IsNotExist(err) {
		t.Errorf("userns file of b after release: %v", err)
	}
	if _, used := r.byBlck[b.HostID/65536]; used {
		t.Errorf("block of b still used after release")
	}
}

func TestUsernsAllocatorExhaustedAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	a := newUsernsAllocator(dir)
	a.blocks = 2
	if _, err := a.Get("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get("c"); err == nil || !strings.Contains(err.Error(), "could not find an empty slot") {
		t.Errorf("third pod in two blocks: %v", err)
	}
	a.Release("a")
	if m, err := a.Get("c"); err != nil || m.HostID != 65536 {
		t.Errorf("after release: %+v, %v", m, err)
	}

	// Block 0 (the host's own users) and a mapping not starting at 0 are refused.
	for name, content := range map[string]string{
		"zero":   `{"uidMappings":[{"hostId":0,"containerId":0,"length":65536}],"gidMappings":[{"hostId":0,"containerId":0,"length":65536}]}`,
		"noroot": `{"uidMappings":[{"hostId":131072,"containerId":1,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":1,"length":65536}]}`,
		"differ": `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":196608,"containerId":0,"length":65536}]}`,
		"junk":   `{`,
	} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "userns"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := newUsernsAllocator(dir).Get(types.UID(name)); err == nil {
			t.Errorf("%s: accepted %s", name, content)
		}
	}
}

func TestContainerSecurityProfiles(t *testing.T) {
	unmasked := v1.UnmaskedProcMount
	r := &Runtime{cfg: Config{RootDir: "/var/lib/hostlet"}}
	pod := &v1.Pod{Spec: v1.PodSpec{
		SecurityContext: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
		Containers:      []v1.Container{{Name: "c"}},
	}}
	c := &pod.Spec.Containers[0]
	if sec, err := r.containerSecurity(pod, c, ""); err != nil || sec.Seccomp != "RuntimeDefault" || sec.AppArmor != "" {
		t.Errorf("pod RuntimeDefault: %+v %v", sec, err)
	}
	name := "profiles/audit.json"
	c.SecurityContext = &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: &name},
		AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}, ProcMount: &unmasked}
	if sec, err := r.containerSecurity(pod, c, ""); err != nil || sec.Seccomp != "/var/lib/hostlet/seccomp/profiles/audit.json" || sec.AppArmor != "Unconfined" || !sec.UnmaskedProc {
		t.Errorf("container Localhost: %+v %v", sec, err)
	}
	c.SecurityContext.SeccompProfile.LocalhostProfile = nil
	if _, err := r.containerSecurity(pod, c, ""); err == nil || err.Error() != "localhostProfile must be set if seccompProfile type is Localhost." {
		t.Errorf("Localhost without a name: %v", err)
	}
}

// seccompDefault: a container naming no profile runs RuntimeDefault, one
// naming Unconfined stays so; without it, no profile is Unconfined.
func TestSeccompDefault(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	c := &pod.Spec.Containers[0]
	r := &Runtime{cfg: Config{RootDir: "/var/lib/hostlet"}}
	if sec, err := r.containerSecurity(pod, c, ""); err != nil || sec.Seccomp != "" {
		t.Errorf("no seccompDefault: %q %v, want none", sec.Seccomp, err)
	}
	r.cfg.SeccompDefault = true
	if sec, err := r.containerSecurity(pod, c, ""); err != nil || sec.Seccomp != "RuntimeDefault" {
		t.Errorf("seccompDefault: %q %v, want RuntimeDefault", sec.Seccomp, err)
	}
	c.SecurityContext = &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}
	if sec, err := r.containerSecurity(pod, c, ""); err != nil || sec.Seccomp != "" && sec.Seccomp != "Unconfined" {
		t.Errorf("seccompDefault with Unconfined asked: %q %v", sec.Seccomp, err)
	}
}

// userNamespaces.idsPerPod as the kubelet's user namespace manager checks
// it at start: whole blocks from one block up to 2^32, enough for maxPods
// (no "kubelet" user: the default range).
func TestUserNamespaceRange(t *testing.T) {
	noUser := func(name string) error { return user.UnknownUserError(name) }
	for _, c := range []struct {
		ids     int64
		maxPods int
		want    uint32
		err     string
	}{
		{0, 110, 65536, ""},
		{65536, 110, 65536, ""},
		{1 << 20, 110, 1 << 20, ""},
		{3 * 65536, 110, 0, "kubelet user assigned IDs length 4294770688 is not a multiple of 196608"},
		{1 << 26, 110, 0, "kubelet user assigned IDs are not enough to support 110 pods"},
	} {
		got, err := UserNamespaceRange(c.ids, c.maxPods, noUser, nil)
		if got.PerPod != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.HasSuffix(err.Error(), c.err)) {
			t.Errorf("idsPerPod %d: %+v, %v; want %d, %q", c.ids, got, err, c.want, c.err)
		}
		if err == nil && (got.First != got.PerPod || uint64(got.First)+uint64(got.Length) != 1<<32) {
			t.Errorf("idsPerPod %d: default range %+v", c.ids, got)
		}
	}
}

// A "kubelet" user's subordinate IDs are the range, as the kubelet's
// getKubeletMappings reads them with getsubids; the same checks apply, and
// what getsubids cannot say is an error.
func TestUserNamespaceRangeKubeletUser(t *testing.T) {
	isUser := func(string) error { return nil }
	subids := func(uids, gids string) func(args ...string) (string, error) {
		return func(args ...string) (string, error) {
			if args[0] == "-g" {
				return gids, nil
			}
			return uids, nil
		}
	}
	r, err := UserNamespaceRange(0, 110, isUser, subids("0: kubelet 65536 7208960\n", "0: kubelet 65536 7208960\n"))
	if err != nil || r != (UsernsRange{First: 65536, Length: 7208960, PerPod: 65536}) {
		t.Errorf("%+v, %v", r, err)
	}
	a := newUsernsAllocatorIn(t.TempDir(), r)
	if m, err := a.Get("a"); err != nil || m.HostID != 65536 || m.Size != 65536 {
		t.Errorf("first pod's mapping %+v, %v", m, err)
	}
	for _, c := range []struct{ uids, gids, err string }{
		{"0: kubelet 65536 7208960\n", "0: kubelet 131072 7208960\n", `mismatched subuids and subgids for user "kubelet"`},
		{"0: kubelet 100000 7208960\n", "0: kubelet 100000 7208960\n", "kubelet user assigned ID 100000 is not a multiple of 65536"},
		{"0: kubelet 65536 65536\n", "0: kubelet 65536 65536\n", "kubelet user assigned IDs are not enough to support 110 pods"},
		{"", "", `invalid line ""`},
	} {
		if _, err := UserNamespaceRange(0, 110, isUser, subids(c.uids, c.gids)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v, want %q", c.uids, err, c.err)
		}
	}
	failing := func(...string) (string, error) { return "", errors.New("exit status 1") }
	if _, err := UserNamespaceRange(0, 110, isUser, failing); err == nil || !strings.Contains(err.Error(), `error retrieving additional uids for user "kubelet"`) {
		t.Errorf("getsubids failing: %v", err)
	}
}

// With idsPerPod 1Mi each pod gets a 1Mi-aligned block of 1Mi above the
// host's own; a persisted mapping of another length is not taken.
func TestUsernsAllocatorIDsPerPod(t *testing.T) {
	dir := t.TempDir()
	a := newUsernsAllocatorOf(dir, 1<<20)
	m, err := a.Get("a")
	if err != nil {
		t.Fatal(err)
	}
	if m.Size != 1<<20 || m.HostID%(1<<20) != 0 || m.HostID < 1<<20 {
		t.Errorf("mapping %+v", m)
	}
	if _, err := newUsernsAllocatorOf(dir, 65536).load("a"); err == nil || !strings.Contains(err.Error(), "wrong user namespace range") {
		t.Errorf("a 1Mi mapping read with 65536 per pod: %v", err)
	}
}
