package images

import (
	"context"
)

// Users of the base image: root, nobody and an unprivileged 1000 for
// runAsUser tests.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n" +
		"user:x:1000:1000:user:/tmp:/bin/sh\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"user:x:1000:\n"
)

// makeBusyboxLayer lays out a minimal root file system around the static
// busybox: the binary, one symlink per applet and the usual top-level dirs.
func makeBusyboxLayer(ctx context.Context, busybox []byte) (layer, error) {
	applets, err := busyboxApplets(ctx, busyboxPath)
	if err != nil {
		return layer{}, err
	}
	entries := []entry{
		file("bin/busybox", 0o755, busybox),
		file("etc/passwd", 0o644, []byte(passwd)),
		file("etc/group", 0o644, []byte(group)),
		dir("tmp", 0o1777),
		dir("root", 0o700),
		dir("dev", 0o755),
		dir("proc", 0o555),
		dir("sys", 0o555),
		dir("usr/sbin", 0o755), // applet dirs are implied, but keep the PATH dirs certain
		dir("usr/bin", 0o755),
		dir("sbin", 0o755),
	}
	for _, a := range applets {
		entries = append(entries, symlink(a, "/bin/busybox"))
	}
	return buildLayer(entries)
}
