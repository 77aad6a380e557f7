#!/bin/bash
# Builds the Debian VM image of the host test (make hosttest) from Debian's
# packages: a minbase with systemd as PID 1 (cgroup v2, Debian 12's default),
# the stock kernel, openssh-server, iproute2, iptables and the CNI plugins.
# What hostlet needs beyond Debian's packages (hostlet, images, and on
# Debian 12 containerd >= 1.7 and runc) is not baked in: the test hands it to
# each boot on a second disk, so a rebuilt component never rebuilds the image.
#
# The image is cached in $HOSTLET_CACHE/vm/<suite>-<key>, the key being the
# hash of this script and the suite: a second run is a no-op. Prints that
# directory on stdout: disk.img (raw ext4, the root file system, no
# partition table), vmlinuz and initrd.img (booted directly by qemu),
# id_ed25519 (root's ssh key; the public half is in the image).
#   usage: mkimage.sh [suite]   (bookworm, the default, or trixie)
set -euo pipefail

suite=${1:-bookworm}
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
key=$( (cat "$0"; echo "$suite") | sha256sum | cut -c1-16)
out=$cache/vm/$suite-$key
if [ -f "$out/done" ]; then
	echo "$out"
	exit 0
fi

# Debian's packages a user's host has: systemd as init, the kernel, ssh for
# the test to drive it, what hostlet's preflight and CNI need (iproute2,
# iptables, kmod for br_netfilter, the CNI plugins), udev for the disks;
# apparmor, which the kernel recommends and so a standard install has (on a
# host with AppArmor on in the kernel but no apparmor_parser, hostlet fails
# every container: test/hosttest/README.md). nfs-common, which the package
# recommends, and an NFS server for the test's nfs volumes and PVs to mount
# (exports on the VM's own loopback); open-iscsi, which it also recommends,
# and tgt, an iSCSI target for the test's iSCSI PVs (LUNs on loopback).
packages=systemd,systemd-sysv,dbus,udev,kmod,linux-image-amd64,apparmor,openssh-server,iproute2,iptables,containernetworking-plugins,ca-certificates,libseccomp2,procps,e2fsprogs,nfs-common,nfs-kernel-server,open-iscsi,tgt
case $suite in
# Debian 12's containerd is 1.6.20, which hostlet's preflight refuses: the
# test brings its own. Debian 13's is 1.7: the host uses it (and its runc),
# and crun, which the test configures as a second runtime handler.
bookworm) ;;
*) packages=$packages,containerd,crun ;;
esac
mirror=http://deb.debian.org/debian

mkdir -p "$cache/vm"
tmp=$(mktemp -d "$cache/vm/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -p "$root"
t0=$(date +%s)

ssh-keygen -q -t ed25519 -N '' -C hosttest -f "$tmp/id_ed25519"

# The network comes from the kernel command line (ip=..., which
# systemd-network-generator turns into a systemd-networkd config): the test
# picks the addresses for each run, the image holds none.
mmdebstrap --variant=minbase --include="$packages" \
	--customize-hook='echo hosttest > "$1/etc/hostname"' \
	--customize-hook='printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" > "$1/etc/fstab"' \
	--customize-hook='printf "127.0.0.1 localhost\n127.0.1.1 hosttest\n" > "$1/etc/hosts"' \
	--customize-hook='chroot "$1" systemctl enable systemd-networkd systemd-network-generator ssh' \
	--customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer' \
	--customize-hook='mkdir -p -m 700 "$1/root/.ssh"' \
	--customize-hook="cp $tmp/id_ed25519.pub \"\$1/root/.ssh/authorized_keys\"" \
	--customize-hook='printf "br_netfilter\noverlay\n" > "$1/etc/modules-load.d/hosttest.conf"' \
	--customize-hook='printf "net.ipv4.ip_forward=1\nnet.bridge.bridge-nf-call-iptables=1\n" > "$1/etc/sysctl.d/90-hosttest.conf"' \
	--customize-hook='printf "nameserver 127.0.0.1\n" > "$1/etc/resolv.conf"' \
	--customize-hook='mkdir -p "$1/var/log/journal"' \
	--customize-hook='chroot "$1" passwd -d root' \
	--customize-hook="cp \"\$1\"/boot/vmlinuz-* $tmp/vmlinuz && cp \"\$1\"/boot/initrd.img-* $tmp/initrd.img" \
	"$suite" "$root" "$mirror" >&2
t1=$(date +%s)

# Room for images, containers and logs: the file is sparse.
truncate -s 8G "$tmp/disk.img"
mkfs.ext4 -q -L hosttest -d "$root" "$tmp/disk.img" >&2
rm -rf "$root"
echo "mmdebstrap $((t1 - t0))s, mkfs $(($(date +%s) - t1))s" > "$tmp/build-times"
touch "$tmp/done"
mkdir -p "$cache/vm"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Older builds of this suite are stale.
for d in "$cache/vm/$suite"-*; do
	[ "$d" = "$out" ] || rm -rf "$d"
done
echo "$out"
