#!/usr/bin/env bash
# Builds the upstream node-conformance tooling from the module pinned beside
# this script: e2e.test (reporting the pinned Kubernetes version), the ginkgo
# CLI, and the static agnhost and nnp (nonewprivs) binaries plus agnhost's
# test certificate, which the test images are made of. `build.sh node`
# builds the kubelet's own suite instead, e2e_node.test (make node-e2e), with
# the ginkgo CLI, in a cache dir of its own: the conformance runs never pay
# for it. The cache is keyed by go.mod, go.sum and this script, so a second
# run is a no-op. Prints the output directory on stdout.
#   usage: build.sh [node]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
what=e2e
pkg=k8s.io/kubernetes/test/e2e
case "${1:-}" in
"") ;;
node) what=e2e_node pkg=k8s.io/kubernetes/test/e2e_node ;;
*) echo "usage: build.sh [node]" >&2; exit 2 ;;
esac
base=$cache/${what/_/-} # e2e, e2e-node
out=$base/$key
if [ -f "$out/.done" ] && [ -x "$out/$what.test" ]; then
	echo "$out"
	exit 0
fi

kubever=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
[ -n "$kubever" ] || { echo "build.sh: cannot read the pinned k8s.io/kubernetes version" >&2; exit 1; }
kminor=$(echo "$kubever" | cut -d. -f2)
# e2e.test logs and checks its version like the kube binaries do.
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$kubever -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kminor"
ldflags="$ldflags -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$kubever"

echo "building $what.test and ginkgo ($kubever) ..." >&2
t0=$SECONDS
# A directory of its own: two builds at once (two checkouts) must not clear
# each other's output.
mkdir -p "$base"
tmp=$(mktemp -d "$base/.partial-$key.XXXXXX")
cd "$here"
export CGO_ENABLED=0
go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$tmp/$what.test" "$pkg" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo >&2
if [ "$what" = e2e ]; then
	go build -trimpath -ldflags "-s -w" -o "$tmp/agnhost" k8s.io/kubernetes/test/images/agnhost >&2
	go build -trimpath -ldflags "-s -w" -o "$tmp/nnp" k8s.io/kubernetes/test/images/nonewprivs >&2
	# The agnhost image carries porter's test certificate as /localhost.{crt,key}.
	kdir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
	cp "$kdir/test/images/agnhost/porter/localhost.crt" "$kdir/test/images/agnhost/porter/localhost.key" "$tmp/"
	chmod 0644 "$tmp/localhost.crt" "$tmp/localhost.key"
fi
touch "$tmp/.done"
# Older keys' builds are hundreds of MB each: keep only this one (and builds
# still in progress).
find "$base" -mindepth 1 -maxdepth 1 -not -name ".partial-*" -not -name "$key" -exec rm -rf {} +
if [ -f "$out/.done" ] && [ -x "$out/$what.test" ]; then
	rm -rf "$tmp" # another build finished first
else
	rm -rf "$out"
	mv "$tmp" "$out"
fi
echo "built $what tooling in $((SECONDS - t0))s" >&2
echo "$out"
