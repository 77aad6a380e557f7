package main

import (
	"fmt"
	"io"
	goruntime "runtime"

	"github.com/hostlet/hostlet/provider/node"
)

// version is hostlet's release version, from git describe, set at link time
// by make (-ldflags "-X main.version=..."); a plain go build says "dev".
var version = "dev"

// printVersion is `hostlet version` (and `--version`): the release, the
// kubelet whose behaviour it implements (what the Node reports), and the Go
// toolchain and platform, which with the commit fix a reproducible build.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "hostlet %s (kubelet %s, %s %s/%s)\n", version, node.KubeletVersion, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}
