package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// appArmorDefaultProfile is the profile CRI loads for RuntimeDefault. The
// same name: a profile containerd's CRI already loaded on the host is used
// as it is, and CRI uses the one hostlet loaded.
const appArmorDefaultProfile = "cri-containerd.apparmor.d"

// AppArmorEnabled reports whether the host enforces AppArmor, checked as
// the kubelet does.
func AppArmorEnabled() bool {
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err != nil {
		return false
	}
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(b) > 1 && b[0] == 'Y'
}

// appArmorRuntimeEnabled is whether containers get AppArmor profiles, as
// containerd's CRI decides it (apparmor.HostSupports): the kubelet's check
// and also apparmor_parser installed and not running in a container. A
// host whose kernel has AppArmor but not the parser (a Debian minbase: the
// apparmor package is only recommended) runs containers unconfined, as
// with CRI, instead of failing every one on loading the default profile.
var appArmorRuntimeEnabled = sync.OnceValue(func() bool {
	if !AppArmorEnabled() || os.Getenv("container") != "" {
		return false
	}
	_, err := os.Stat("/sbin/apparmor_parser")
	return err == nil
})

// appArmorOpt applies an AppArmor profile as CRI does: "" (not set) is
// RuntimeDefault where the host has AppArmor, nothing where it has not;
// a profile asked for on a host without AppArmor is an error.
func appArmorOpt(profile string, privileged, enabled bool) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if !enabled {
			if profile != "" && profile != ProfileUnconfined {
				return errors.New("apparmor is not supported")
			}
			return nil
		}
		switch profile {
		case ProfileUnconfined:
			return nil
		case "", ProfileRuntimeDefault:
			if privileged {
				return nil
			}
			if err := loadAppArmorDefault(appArmorDefaultProfile); err != nil {
				return err
			}
			s.Process.ApparmorProfile = appArmorDefaultProfile
			return nil
		}
		if ok, err := appArmorProfileLoaded(profile); !ok {
			if err != nil {
				return fmt.Errorf("failed to generate apparmor spec opts: %w", err)
			}
			return fmt.Errorf("apparmor profile not found %s", profile)
		}
		s.Process.ApparmorProfile = profile
		return nil
	}
}

// appArmorProfileLoaded looks for a loaded profile, as CRI does.
func appArmorProfileLoaded(name string) (bool, error) {
	b, err := os.ReadFile("/sys/kernel/security/apparmor/profiles")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" (") {
			return true, nil
		}
	}
	return false, nil
}

// appArmorLoad serialises the default profile's check and load: the
// containers of a burst would otherwise each run apparmor_parser.
var appArmorLoad sync.Mutex

// loadAppArmorDefault loads the RuntimeDefault profile under name unless a
// profile of that name is loaded, as containerd's contrib/apparmor does
// (hostlet renders it itself: contrib/apparmor's text/template makes the
// linker keep every exported method of the binary).
func loadAppArmorDefault(name string) error {
	appArmorLoad.Lock()
	defer appArmorLoad.Unlock()
	if ok, err := appArmorProfileLoaded(name); err != nil || ok {
		return err
	}
	cmd := exec.Command("apparmor_parser", "-Kr")
	cmd.Stdin = strings.NewReader(hostAppArmorDefault(name).render())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("load apparmor profile %s: parser error(%q): %w", name, strings.TrimSpace(string(out)), err)
	}
	return nil
}

// appArmorDefault is what the RuntimeDefault profile takes from the host.
type appArmorDefault struct {
	name string
	// abi is the policy ABI the rules are written for, declared only where
	// the host's parser knows it (AppArmor 3).
	abi string
	// imports come before the profile, innerImports inside it.
	imports, innerImports []string
	// daemonProfile is hostlet's own profile: its processes may signal the
	// containers.
	daemonProfile string
	// rootlessKit is the rootlesskit binary's path, if any: nerdctl's
	// rootless mode signals containers from it.
	rootlessKit string
}

// appArmorDir holds the host parser's abi, tunables and abstractions.
const appArmorDir = "/etc/apparmor.d"

// hostAppArmorDefault finds what the profile takes from this host, as
// containerd does.
func hostAppArmorDefault(name string) appArmorDefault {
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(appArmorDir, p))
		return err == nil
	}
	p := appArmorDefault{name: name}
	if exists("abi/3.0") {
		p.abi = "abi/3.0"
	}
	if exists("tunables/global") {
		p.imports = append(p.imports, "#include <tunables/global>")
	} else {
		p.imports = append(p.imports, "@{PROC}=/proc/")
	}
	if exists("abstractions/base") {
		p.innerImports = append(p.innerImports, "#include <abstractions/base>")
	}
	// Unreadable (no AppArmor, or unconfined): unconfined.
	current, _ := os.ReadFile("/proc/self/attr/current")
	p.daemonProfile = daemonProfileName(string(current))
	p.rootlessKit, _ = exec.LookPath("rootlesskit")
	return p
}

// daemonProfileName is the profile name in /proc/self/attr/current, which
// reads "name (mode)\n", or "unconfined\n" (containerd keeps that newline
// in the rule; the parser does not mind, but it is not part of the name).
func daemonProfileName(current string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(current), " ")
	if name == "" {
		return "unconfined"
	}
	return name
}

// render writes the profile: containerd's default rules (Docker's, which
// CRI loads), laid out line for line as containerd writes them.
func (p appArmorDefault) render() string {
	var b strings.Builder
	line := func(parts ...string) {
		for _, s := range parts {
			b.WriteString(s)
		}
		b.WriteByte('\n')
	}
	line()
	if p.abi != "" {
		line("abi <", p.abi, ">,")
	}
	line()
	for _, s := range p.imports {
		line()
		line(s)
	}
	line()
	line()
	line("profile ", p.name, " flags=(attach_disconnected,mediate_deleted) {")
	for _, s := range p.innerImports {
		line()
		line("  ", s)
	}
	line()
	line()
	b.WriteString(appArmorBaseRules)
	line("  # Manager may send signals to container processes.")
	line("  signal (receive) peer=", p.daemonProfile, ",")
	line("  # Container processes may send signals amongst themselves.")
	line("  signal (send,receive) peer=", p.name, ",")
	if p.rootlessKit != "" {
		line()
		line("  # https://github.com/containerd/nerdctl/issues/2730")
		line("  signal (receive) peer=", p.rootlessKit, ",")
	}
	line()
	line()
	b.WriteString(appArmorDenyRules)
	line("  # allow processes within the container to trace each other,")
	line("  # provided all other LSM and yama setting allow it.")
	line("  ptrace (trace,tracedby,read,readby) peer=", p.name, ",")
	line("}")
	return b.String()
}

// appArmorBaseRules allow what a container does and the signals of the
// host's unconfined processes and of the OCI runtimes.
const appArmorBaseRules = `  network,
  capability,
  file,
  umount,
  # Host (privileged) processes may send signals to container processes.
  signal (receive) peer=unconfined,
  # runc may send signals to container processes.
  signal (receive) peer=runc,
  # crun may send signals to container processes.
  signal (receive) peer=crun,
`

// appArmorDenyRules keep containers from writing the host's /proc and
// /sys knobs and from mounting.
const appArmorDenyRules = `  deny @{PROC}/* w,   # deny write for all files directly in /proc (not in a subdir)
  # deny write to files not in /proc/<number>/** or /proc/sys/**
  deny @{PROC}/{[^1-9],[^1-9][^0-9],[^1-9s][^0-9y][^0-9s],[^1-9][^0-9][^0-9][^0-9]*}/** w,
  deny @{PROC}/sys/[^k]** w,  # deny /proc/sys except /proc/sys/k* (effectively /proc/sys/kernel)
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,  # deny everything except shm* in /proc/sys/kernel/
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/mem rwklx,
  deny @{PROC}/kmem rwklx,
  deny @{PROC}/kcore rwklx,

  deny mount,

  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,

`
