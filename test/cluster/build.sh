#!/usr/bin/env bash
# Builds the real components the tests run against (etcd, the Kubernetes control
# plane, containerd, runc) from the pinned modules beside this script, into a
# cache outside the repo keyed by each pin's go.mod/go.sum, so a second run is a
# no-op. Prints the bin directory on stdout.
#   usage: build.sh [component...]   (default: etcd kube containerd runc;
#   kubelet, the upstream yardstick for make bench, kube-proxy and coredns, for
#   the Service and DNS tests, metrics-server, for kubectl top and the HPA, and
#   flannel, the CNI DaemonSet's flanneld and CNI plugin, and csi-provisioner
#   and csi-attacher, the CSI controller sidecars, and csi-snapshotter and
#   snapshot-controller, and crun, for make bench's -runtime crun, only on
#   request)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
bin=$cache/bin
mkdir -p "$bin"

# The key covers this recipe too, so a change of flags rebuilds.
key() { cat "$here/$1/go.mod" "$here/$1/go.sum" "$here/build.sh" | sha256sum | cut -c1-12; }

# modver DIR MODULE: the pinned version of MODULE in DIR/go.mod.
modver() { awk -v m="$2" '$1==m {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$here/$1/go.mod"; }

# build COMPONENT TAGS LDFLAGS PKG:OUT...   (MOD=dir when the module's folder
# is not named after the component)
build() {
	local comp=$1 tags=$2 ldflags=$3; shift 3
	local mod=${MOD:-$comp}
	local stamp="$bin/.$comp-$(key "$mod")"
	[ -f "$stamp" ] && return 0
	echo "building $comp ..." >&2
	local t0=$SECONDS
	for spec in "$@"; do
		local pkg=${spec%%:*} out=${spec##*:}
		(cd "$here/$mod" && CGO_ENABLED=${CGO:-0} go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$bin/$out" "$pkg") >&2
	done
	rm -f "$bin/.$comp-"*
	touch "$stamp"
	echo "built $comp in $((SECONDS - t0))s" >&2
}

# crun is C: Debian's source of the pinned release (trixie's 1.21; bookworm's
# 1.8 refuses containerd 2.2's OCI spec 1.2.1), checked against the digest
# Debian's Sources index gives, and built against the host's libraries
# (make bench-deps installs them). Its own key: the pin and this recipe.
crunver=1.21
crunsha=4bfb700e764a4804a4de3ecf07753f4c391005356d60356df65d80ae0914c486
build_crun() {
	local stamp="$bin/.crun-$(echo "$crunver $crunsha" | cat - "$here/build.sh" | sha256sum | cut -c1-12)"
	[ -f "$stamp" ] && return 0
	echo "building crun $crunver ..." >&2
	local t0=$SECONDS src="$cache/src" work
	mkdir -p "$src"
	local tgz="$src/crun_$crunver.orig.tar.gz"
	if ! echo "$crunsha  $tgz" | sha256sum -c --status 2>/dev/null; then
		curl -fsSL --retry 3 -o "$tgz.part" "http://deb.debian.org/debian/pool/main/c/crun/crun_$crunver.orig.tar.gz" >&2
		echo "$crunsha  $tgz.part" | sha256sum -c --status || { echo "crun_$crunver.orig.tar.gz: digest mismatch" >&2; exit 1; }
		mv "$tgz.part" "$tgz"
	fi
	work=$(mktemp -d)
	tar -xzf "$tgz" -C "$work"
	if ! (cd "$work/crun-$crunver" && ./configure --disable-dependency-tracking --enable-embedded-yajl --disable-criu &&
		make git-version.h && make -j"$(nproc)" && install -m 0755 crun "$bin/crun") >"$work/build.log" 2>&1; then
		tail -30 "$work/build.log" >&2
		echo "building crun failed (make bench-deps installs what it needs)" >&2
		exit 1
	fi
	rm -rf "$work"
	rm -f "$bin/.crun-"*
	touch "$stamp"
	echo "built crun in $((SECONDS - t0))s" >&2
}

kubever=$(modver kube k8s.io/kubernetes)
kminor=$(echo "$kubever" | cut -d. -f2)
vpkg=k8s.io/component-base/version
kldflags="-s -w -X $vpkg.gitVersion=$kubever -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kminor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
kldflags="$kldflags -X k8s.io/client-go/pkg/version.gitVersion=$kubever -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$kminor"
ctrver=$(modver containerd github.com/containerd/containerd/v2)
runcver=$(modver runc github.com/opencontainers/runc)
for v in "$kubever" "$ctrver" "$runcver"; do
	[ -n "$v" ] || { echo "build.sh: cannot read a pinned version" >&2; exit 1; }
done

for comp in "${@:-etcd kube containerd runc}"; do
	for c in $comp; do
		case $c in
		etcd) build etcd "" "-s -w" go.etcd.io/etcd/server/v3:etcd ;;
		kube) build kube "" "$kldflags" \
			k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver \
			k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler:kube-scheduler \
			k8s.io/kubernetes/cmd/kubectl:kubectl ;;
		# Same module and version stamp as the control plane; its own stamp so
		# the tests that never need it don't pay for it.
		kubelet) MOD=kube build kubelet "" "$kldflags" k8s.io/kubernetes/cmd/kubelet:kubelet ;;
		# Only for the Service tests, on nodes in their own network namespace.
		kube-proxy) MOD=kube build kube-proxy "" "$kldflags" k8s.io/kubernetes/cmd/kube-proxy:kube-proxy ;;
		# A main of our own with the plugins the tests use (see its main.go).
		coredns) build coredns "" "-s -w" .:coredns ;;
		# For kubectl top and the HPA tests: the module's own command (a tool of
		# test/cluster/metrics-server/go.mod).
		metrics-server) build metrics-server "" "-s -w" sigs.k8s.io/metrics-server/cmd/metrics-server:metrics-server ;;
		# For the CNI DaemonSet tests: flanneld (static with the UDP backend's
		# C proxy, as upstream builds it on amd64) and its CNI plugin (named
		# as its CNI type), pinned in a module of its own (see cni-plugin/go.mod).
		flannel)
			flver=$(modver flannel github.com/flannel-io/flannel)
			CGO=1 build flannel "netgo osusergo" "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$flver -extldflags -static" \
				github.com/flannel-io/flannel:flanneld
			MOD=flannel/cni-plugin build flannel-cni "" "-s -w" github.com/containernetworking/plugins/plugins/meta/flannel:flannel ;;
		# For the CSI provisioning tests: upstream's controller sidecars, run
		# against the API server next to the test driver's controller service.
		csi-provisioner) MOD=csi-sidecars build csi-provisioner "" "-s -w" \
			github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner:csi-provisioner ;;
		csi-attacher) MOD=csi-sidecars build csi-attacher "" "-s -w" \
			github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher:csi-attacher ;;
		# For -csi-hostpath's snapshot testsuites: external-snapshotter's
		# sidecar (into the hostpath manifest's image) and its controller.
		csi-snapshotter) build csi-snapshotter "" "-s -w" \
			github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter:csi-snapshotter ;;
		snapshot-controller) MOD=csi-snapshotter build snapshot-controller "" "-s -w" \
			github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller:snapshot-controller ;;
		containerd) build containerd "" "-s -w -X github.com/containerd/containerd/v2/version.Version=$ctrver" \
			github.com/containerd/containerd/v2/cmd/containerd:containerd \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2:containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr:ctr ;;
		crun) build_crun ;;
		runc) CGO=1 build runc "seccomp urfave_cli_no_docs" "-s -w -X main.version=${runcver#v}" github.com/opencontainers/runc:runc ;;
		*) echo "unknown component $c" >&2; exit 2 ;;
		esac
	done
done
echo "$bin"
