#!/usr/bin/env bash
# Builds crictl (sigs.k8s.io/cri-tools, the version pinned below) into the
# component cache (bin/crictl), for the CRI tests: the real client, as on a
# kubelet node. Its own script and key, like test/cluster/helm/build.sh, so
# pinning crictl never rebuilds the other components. A second run is a
# no-op. Prints the bin directory on stdout.
#   usage: build.sh
set -euo pipefail
version=v1.37.0
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
bin=$cache/bin
mkdir -p "$bin"
key=$(sha256sum "$0" | cut -c1-12)
stamp="$bin/.crictl-$key"
if [ -f "$stamp" ] && [ -x "$bin/crictl" ]; then
	echo "$bin"
	exit 0
fi
echo "building crictl $version ..." >&2
t0=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Outside any module (the repo's go.mod must not pin cri-tools' deps):
# go install of a version resolves crictl's own go.mod through the proxy.
# Built beside and renamed into place, so a test running the old binary
# never sees a half-written one.
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath go install \
	-ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$version" \
	"sigs.k8s.io/cri-tools/cmd/crictl@$version") >&2
mv -f "$tmp/crictl" "$bin/.crictl.tmp.$$"
mv -f "$bin/.crictl.tmp.$$" "$bin/crictl"
rm -f "$bin/.crictl-"*
touch "$stamp"
echo "built crictl in $((SECONDS - t0))s" >&2
echo "$bin"
