package images

import (
	"context"
	"maps"
	"path/filepath"
	"slices"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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

// BuildBusyboxWith builds image ref into outDir: the busybox image with
// files (path in the image: content, mode 0644) on top, for a test that
// needs what the image itself holds to differ (its /etc/group); outDir is
// the test's own, never the shared cache.
func BuildBusyboxWith(ctx context.Context, outDir, ref string, files map[string][]byte) (Image, error) {
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	base, err := makeBusyboxLayer(ctx, busybox)
	if err != nil {
		return Image{}, err
	}
	var entries []entry
	for _, name := range slices.Sorted(maps.Keys(files)) {
		entries = append(entries, file(name, 0o644, files[name]))
	}
	top, err := buildLayer(entries)
	if err != nil {
		return Image{}, err
	}
	archive := filepath.Join(outDir, fileStem(ref)+".tar")
	spec := imageSpec{ref: ref, layers: []layer{base, top},
		config: ocispec.ImageConfig{Env: []string{"PATH=" + defaultPath}, Cmd: []string{"sh"}}}
	if err := writeArchive(archive, spec); err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Archive: archive}, nil
}
