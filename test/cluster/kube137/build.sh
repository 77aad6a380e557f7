#!/usr/bin/env bash
# Builds the newer control plane `make compat` runs hostlet against
# (kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the
# k8s.io/kubernetes pinned beside this script) into the component cache under
# its minor version (bin/v1.37/), beside the pinned 1.35 one; with the
# argument kube-proxy, that version's kube-proxy (what a cluster of that
# version runs as its DaemonSet), only for the tests that deploy it. Its own script
# and key, like test/cluster/helm, so this pin never changes the key of
# test/cluster/build.sh's components (a change there rebuilds them all for
# every checkout sharing the cache). A second run is a no-op. Prints the
# directory holding the binaries on stdout.
#   usage: build.sh [kube-proxy]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
ver=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3; exit} $1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
[ -n "$ver" ] || { echo "build.sh: cannot read the pinned k8s.io/kubernetes version" >&2; exit 1; }
minor=$(echo "$ver" | cut -d. -f2)
out=$cache/bin/v1.$minor
mkdir -p "$out"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
cmds="kube-apiserver kube-controller-manager kube-scheduler kubectl"
what=kube
if [ "${1:-}" = kube-proxy ]; then
	cmds=kube-proxy what=kube-proxy
fi
stamp="$out/.$what-$key"
if [ -f "$stamp" ]; then
	echo "$out"
	exit 0
fi
echo "building the $ver $what ..." >&2
t0=$SECONDS
# The stamps a release build carries: the API server reports them as
# /version, and the harness refuses unstamped binaries.
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$ver -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$ver -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for cmd in $cmds; do
	# Built beside and renamed into place, so a test running the old binary
	# never sees a half-written one.
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/.$cmd.tmp.$$" "k8s.io/kubernetes/cmd/$cmd") >&2
	mv -f "$out/.$cmd.tmp.$$" "$out/$cmd"
done
rm -f "$out/.$what-"*
touch "$stamp"
echo "built the $ver $what in $((SECONDS - t0))s" >&2
echo "$out"
