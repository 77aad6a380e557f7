#!/usr/bin/env bash
# Builds the Prometheus make e2e-prometheus scrapes hostlet's
# /metrics/cadvisor with: the module's own command (a tool of the go.mod
# beside this script) without service discovery (the test scrapes a static
# target), into the component cache. Its own script and key, like
# test/cluster/kube137, so this pin never changes the key of
# test/cluster/build.sh's components. ~11 min on two busy cores the first
# time; a second run is a no-op. Prints the binary's path on stdout.
#   usage: build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HOSTLET_CACHE:-$HOME/.cache/hostlet}
out=$cache/bin/prometheus
mkdir -p "$out"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
stamp="$out/.prometheus-$key"
if [ -f "$stamp" ]; then
	echo "$out/prometheus"
	exit 0
fi
# The module's v0.3XY.Z is Prometheus 3.XY.Z.
ver=$(awk '$1=="github.com/prometheus/prometheus" {print $2; exit}' "$here/go.mod" | sed -E 's/^v0\.3([0-9]{2})\.([0-9]+)$/3.\1.\2/')
echo "building prometheus $ver ..." >&2
t0=$SECONDS
# Built beside and renamed into place, so a test running the old binary
# never sees a half-written one.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$ver" \
	-o "$out/.prometheus.tmp.$$" github.com/prometheus/prometheus/cmd/prometheus) >&2
mv -f "$out/.prometheus.tmp.$$" "$out/prometheus"
rm -f "$out/.prometheus-"*
touch "$stamp"
echo "built prometheus $ver in $((SECONDS - t0))s" >&2
echo "$out/prometheus"
