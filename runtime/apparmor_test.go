package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/contrib/apparmor"
)

// The profile hostlet loads is the one containerd's CRI loads under the
// same name, on this host, with and without rootlesskit on PATH.
func TestAppArmorDefaultIsContainerds(t *testing.T) {
	for _, rootless := range []bool{false, true} {
		if rootless {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rootlesskit"), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
		}
		want, err := apparmor.DumpDefaultProfile(appArmorDefaultProfile)
		if err != nil {
			t.Fatal(err)
		}
		p := hostAppArmorDefault(appArmorDefaultProfile)
		if rootless != (p.rootlessKit != "") {
			t.Fatalf("rootlesskit on PATH %v, found %q", rootless, p.rootlessKit)
		}
		if got := p.render(); got != want {
			t.Errorf("rootlesskit %v: profile differs from containerd's:\n%s\nwant:\n%s", rootless, got, want)
		}
	}
}

// What the host decides (the abi, the includes) lands where containerd
// puts it; checked apart because this host may have none of them.
func TestAppArmorDefaultHostParts(t *testing.T) {
	p := appArmorDefault{name: "n", abi: "abi/3.0", imports: []string{"#include <tunables/global>"},
		innerImports: []string{"#include <abstractions/base>"}, daemonProfile: "hostlet", rootlessKit: "/usr/bin/rootlesskit"}
	got := p.render()
	for _, want := range []string{
		"\nabi <abi/3.0>,\n\n\n#include <tunables/global>\n\n\nprofile n flags=(attach_disconnected,mediate_deleted) {\n\n  #include <abstractions/base>\n\n\n  network,\n",
		"  signal (receive) peer=hostlet,\n",
		"  signal (send,receive) peer=n,\n\n  # https://github.com/containerd/nerdctl/issues/2730\n  signal (receive) peer=/usr/bin/rootlesskit,\n\n\n  deny @{PROC}/* w,",
		"  ptrace (trace,tracedby,read,readby) peer=n,\n}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("profile lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasPrefix(got, "\nabi <abi/3.0>,\n") || !strings.HasSuffix(got, "peer=n,\n}\n") {
		t.Errorf("abi not first or profile not closed last:\n%s", got)
	}
}

func TestDaemonProfileName(t *testing.T) {
	for in, want := range map[string]string{
		"": "unconfined", "unconfined\n": "unconfined", "hostlet (enforce)\n": "hostlet", "cri-containerd.apparmor.d (complain)": "cri-containerd.apparmor.d",
	} {
		if got := daemonProfileName(in); got != want {
			t.Errorf("daemonProfileName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The host's parser, where there is one, accepts the profile (parsed only:
// -Q loads nothing into the kernel).
func TestAppArmorDefaultParses(t *testing.T) {
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		t.Skip("no apparmor_parser on this host")
	}
	cmd := exec.Command(parser, "-Q", "-K")
	cmd.Stdin = strings.NewReader(hostAppArmorDefault(appArmorDefaultProfile).render())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apparmor_parser: %v\n%s", err, out)
	}
}
