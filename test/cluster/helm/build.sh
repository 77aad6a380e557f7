#!/usr/bin/env bash
# Builds Helm from the module pinned beside this script into the component
# cache (bin/helm), for the chart tests. Its own script and key, so pinning
# Helm never changes the key of test/cluster/build.sh's components (a change
# there rebuilds them all for every checkout sharing the cache). A second run
# is a no-op. Prints the bin directory on stdout.
#   usage: build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
bin=$cache/bin
mkdir -p "$bin"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
stamp="$bin/.helm-$key"
if [ -f "$stamp" ] && [ -x "$bin/helm" ]; then
	echo "$bin"
	exit 0
fi
ver=$(awk '$1=="require" && $2=="helm.sh/helm/v4" {print $3; exit} $1=="helm.sh/helm/v4" {print $2; exit}' "$here/go.mod")
[ -n "$ver" ] || { echo "build.sh: cannot read the pinned helm.sh/helm/v4 version" >&2; exit 1; }
echo "building helm $ver ..." >&2
t0=$SECONDS
# Built beside and renamed into place, so a test running the old binary
# never sees a half-written one.
(cd "$here" && CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$ver -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
	-o "$bin/.helm.tmp.$$" helm.sh/helm/v4/cmd/helm) >&2
mv -f "$bin/.helm.tmp.$$" "$bin/helm"
rm -f "$bin/.helm-"*
touch "$stamp"
echo "built helm in $((SECONDS - t0))s" >&2
echo "$bin"
