package images

import (
	"context"
	"os"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// PauseRef is the sandbox image BuildPause makes, for the upstream
// kubelet's CRI containerd (hostlet has no pause container).
const PauseRef = "hostlet.local/pause:3.10"

// BuildPause builds the sandbox image into outDir: the busybox base with a
// process that only waits (busybox sleep, as long as it goes), the
// entrypoint containerd's CRI runs as a sandbox's pause container. Reused
// while busybox is unchanged.
func BuildPause(ctx context.Context, outDir string) (Image, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Image{}, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	return cachedImage(outDir, PauseRef, []string{PauseRef, sha256Hex(busybox)}, func() (imageSpec, error) {
		base, err := makeBusyboxLayer(ctx, busybox)
		if err != nil {
			return imageSpec{}, err
		}
		return imageSpec{ref: PauseRef, layers: []layer{base}, config: ocispec.ImageConfig{
			Env:        []string{"PATH=" + defaultPath},
			Entrypoint: []string{"/bin/sleep", "2147483647"},
		}}, nil
	})
}
