#!/usr/bin/env bash
# Builds Rancher's local-path-provisioner from the module pinned beside this
# script (a tool of its go.mod) into the component cache
# (bin/local-path-provisioner), for the StatefulSet storage test, its
# version stamped as its own build script does. Its own script and key, so
# this pin never changes the key of test/cluster/build.sh's components (a
# change there rebuilds them all for every checkout sharing the cache). A
# second run is a no-op. Prints the bin directory on stdout.
#   usage: build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
bin=$cache/bin
mkdir -p "$bin"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
stamp="$bin/.local-path-provisioner-$key"
if [ -f "$stamp" ] && [ -x "$bin/local-path-provisioner" ]; then
	echo "$bin"
	exit 0
fi
mod=github.com/rancher/local-path-provisioner
ver=$(awk -v m=$mod '$1=="require" && $2==m {print $3; exit} $1==m {print $2; exit}' "$here/go.mod")
[ -n "$ver" ] || { echo "build.sh: cannot read the pinned $mod version" >&2; exit 1; }
echo "building local-path-provisioner $ver ..." >&2
t0=$SECONDS
# Built beside and renamed into place, so a test running the old binary
# never sees a half-written one.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.VERSION=$ver" \
	-o "$bin/.local-path-provisioner.tmp.$$" $mod) >&2
mv -f "$bin/.local-path-provisioner.tmp.$$" "$bin/local-path-provisioner"
rm -f "$bin/.local-path-provisioner-"*
touch "$stamp"
echo "built local-path-provisioner in $((SECONDS - t0))s" >&2
echo "$bin"
