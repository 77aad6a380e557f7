package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
)

// pauseRef is the CRI containerd's sandbox image. No registry is reachable,
// so it is made here from the conformance runner's pause program.
const pauseRef = "hostlet.local/pause:bench"

// benchImages are the archives the nodes need: the test images for both,
// plus the pause image for the kubelet's CRI runtime.
type benchImages struct {
	test     []string // busybox and testapp
	pause    string
	pauseExe string // the pause program (the images scenario's big image runs it)
}

func buildImages(ctx context.Context, root, cache string) (*benchImages, error) {
	all, err := images.BuildAll(ctx, filepath.Join(cache, "images"))
	if err != nil {
		return nil, err
	}
	bi := &benchImages{}
	for _, img := range all {
		if img.Ref == images.BusyboxRef || img.Ref == images.TestappRef {
			bi.test = append(bi.test, img.Archive)
		}
	}
	if len(bi.test) != 2 {
		return nil, fmt.Errorf("test images: want %s and %s, got %v", images.BusyboxRef, images.TestappRef, all)
	}
	dir := filepath.Join(cache, "bench")
	exe := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", exe, "./test/conformance/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the pause program: %w\n%s", err, out)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		return nil, err
	}
	bi.pause, bi.pauseExe = filepath.Join(dir, "pause.tar"), exe
	return bi, harness.WriteBinaryImage(bi.pause, pauseRef, "pause", b)
}
