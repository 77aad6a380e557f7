package main

import (
	"context"
	"crypto/md5"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// What a host needs beside hostlet, as the package declares it:
//   - ca-certificates: hostlet pulls images itself (containerd's client
//     resolves and fetches in hostlet's process), so TLS to registries uses
//     the host's roots.
//   - iptables: the CNI plugins' portmap and masquerade rules, and the
//     kubelet's own chains hostlet makes (makeIPTablesUtilChains).
//   - CNI plugins: preflight looks in /opt/cni/bin and /usr/lib/cni; Debian's
//     containernetworking-plugins fills the latter, Kubernetes' own
//     kubernetes-cni the former. A CNI DaemonSet (flannel) brings only its
//     own plugin and delegates to bridge and host-local.
//
// containerd is only recommended: Debian 12's is 1.6, which preflight
// refuses (hostlet needs 1.7), so a Depends would make the package
// uninstallable there unless Docker's apt repository is set up, and would
// refuse the hosts running containerd from its release tarball (as the
// host test does). apt installs a Recommends when it can (Debian 13's
// containerd, or Docker's containerd.io) and goes on without it otherwise;
// hostlet join then says what is missing. apparmor: on a kernel with
// AppArmor on, hostlet loads the default container profile with
// apparmor_parser; Debian installs it by default, minimal images lack it.
// nfs-common: mount.nfs, which nfs volumes and PVs are mounted with, as on
// a kubelet's node (without it their pods get the mount's FailedMount).
const (
	debDepends    = "ca-certificates, iptables, containernetworking-plugins | kubernetes-cni"
	debRecommends = "containerd (>= 1.7) | containerd.io (>= 1.7), apparmor, nfs-common"
)

// modulesLoad and sysctl are what hostlet join's preflight checks of the
// kernel (BridgeNetfilter, IPForward) and what kubeadm's documentation has
// users write by hand; shipped under /usr/lib so /etc overrides them, and
// named 60- so an administrator's later files (99-sysctl.conf) win.
const (
	modulesLoad = `# hostlet: bridged pod traffic through iptables (Services, network policy) and
# containerd's overlay snapshotter. Override in /etc/modules-load.d/hostlet.conf.
br_netfilter
overlay
`
	sysctlConf = `# hostlet: a node routes its pods' traffic and filters bridged traffic with
# iptables (what hostlet join's preflight checks). Override in
# /etc/sysctl.d/60-hostlet.conf.
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
`
)

// postinst applies the files above now rather than at the next boot, so
// that hostlet join passes its preflight right after the install; both
// services apply every file in order, so an administrator's settings still
// win. Nothing in a chroot (an image build would change the build host's
// kernel) or without systemd. No unit is written or started: hostlet join
// writes hostlet.service and an upgrade leaves the running hostlet alone.
const postinst = `#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ] && ! systemd-detect-virt --quiet --chroot 2>/dev/null; then
	systemctl restart systemd-modules-load.service || true
	systemctl restart systemd-sysctl.service || true
fi
if [ "$1" = configure ] && [ -n "$2" ] && [ -e /etc/systemd/system/hostlet.service ]; then
	echo "hostlet: the node runs the previous hostlet until: systemctl restart hostlet"
fi
exit 0
`

// prerm refuses a downgrade of a joined node (docs/upgrades.md). dpkg runs
// the installed package's `prerm upgrade <version being installed>` first;
// if it fails, the `prerm failed-upgrade <installed version>` of the package
// being installed, and gives up when that one fails or is missing (releases
// before this script have none). So this script refuses in both places:
// a newer hostlet installed, an older one coming. A joined node is one with
// join's unit or config; there the state (/var/lib/hostlet, the pods' under
// /var/lib/kubelet, the checkpoints) was written by the newer hostlet, and
// nothing guarantees an older one reads it. A host never joined, or one
// left with hostlet leave, downgrades freely; HOSTLET_ALLOW_DOWNGRADE=1 in
// apt's or dpkg's environment forces it. Paths under $DPKG_ROOT, as dpkg
// passes it (and the unit test sets it). %[1]s is the package's version.
const prermTemplate = `#!/bin/sh
set -e
self='%[1]s'
from= to=
case "$1" in
upgrade)
	# this hostlet (self) is installed; $2 is coming
	if dpkg --compare-versions "$2" lt "$self"; then from=$self to=$2; fi ;;
failed-upgrade)
	# this hostlet (self) is coming; $2 is installed
	if dpkg --compare-versions "$2" gt "$self"; then from=$2 to=$self; fi ;;
esac
if [ -n "$from" ] && [ "${HOSTLET_ALLOW_DOWNGRADE:-}" != 1 ] &&
	{ [ -e "$DPKG_ROOT/etc/systemd/system/hostlet.service" ] || [ -e "$DPKG_ROOT/var/lib/hostlet/config.yaml" ]; }; then
	cat >&2 <<EOF
hostlet: refusing to downgrade hostlet $from to $to: this host is joined, and
its state (/var/lib/hostlet, the pods' under /var/lib/kubelet) was written by
$from, which an older hostlet may not read. Either run hostlet leave first
(it drains nothing: move the pods away before) and join again after the
install, or install with HOSTLET_ALLOW_DOWNGRADE=1 in the environment to
downgrade anyway, then systemctl restart hostlet. See docs/upgrades.md.
EOF
	exit 1
fi
exit 0
`

// debFile is one file of the package's tree.
type debFile struct {
	path string // relative to the root
	mode fs.FileMode
	data []byte
}

// buildDeb makes hostlet_<deb version>_<arch>.deb in outDir from a tree
// staged under work, every file's mode and mtime fixed (dpkg-deb then
// clamps to SOURCE_DATE_EPOCH too), owned by root (--root-owner-group), so
// the same inputs give the same bytes.
func buildDeb(ctx context.Context, work, outDir, arch string, v versions, epoch time.Time, maintainer string, binary, copyrightText []byte) (string, error) {
	root := filepath.Join(work, "deb-"+arch)
	files := []debFile{
		{"usr/bin/hostlet", 0o755, binary},
		{"usr/share/doc/hostlet/copyright", 0o644, copyrightText},
		{"usr/lib/modules-load.d/hostlet.conf", 0o644, []byte(modulesLoad)},
		{"usr/lib/sysctl.d/60-hostlet.conf", 0o644, []byte(sysctlConf)},
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	var installedKiB int64
	var sums strings.Builder
	for _, f := range files {
		installedKiB += (int64(len(f.data)) + 1023) / 1024
		fmt.Fprintf(&sums, "%x  %s\n", md5.Sum(f.data), f.path)
	}
	control := fmt.Sprintf(`Package: hostlet
Version: %s
Architecture: %s
Maintainer: %s
Installed-Size: %d
Depends: %s
Recommends: %s
Section: admin
Priority: optional
Homepage: https://github.com/hostlet/hostlet
Description: Kubernetes node agent that runs pods with containerd
 hostlet joins this host to a Kubernetes cluster as a node, in the kubelet's
 place: it registers the Node, runs the pods bound to it with containerd and
 serves the kubelet's API (logs, exec, port-forward, stats).
 .
 Install hostlet's Helm chart in the cluster, then run the hostlet join
 command its notes print: join writes the node's credentials, config and
 systemd unit and starts it. hostlet leave undoes it.
`, v.deb, arch, maintainer, installedKiB, debDepends, debRecommends)
	files = append(files,
		debFile{"DEBIAN/control", 0o644, []byte(control)},
		debFile{"DEBIAN/md5sums", 0o644, []byte(sums.String())},
		debFile{"DEBIAN/postinst", 0o755, []byte(postinst)},
		debFile{"DEBIAN/prerm", 0o755, []byte(fmt.Sprintf(prermTemplate, v.deb))},
	)
	if err := stageTree(root, files, epoch); err != nil {
		return "", err
	}
	deb := filepath.Join(outDir, fmt.Sprintf("hostlet_%s_%s.deb", v.deb, arch))
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, deb)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb --build: %w\n%s", err, out)
	}
	return deb, nil
}

// stageTree writes files under root with their parent directories (0755),
// then sets every mtime to epoch: nothing of the umask or the clock.
func stageTree(root string, files []debFile, epoch time.Time) error {
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
		}
		return os.Chtimes(p, epoch, epoch)
	})
}
