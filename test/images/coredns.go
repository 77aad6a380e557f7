package images

import (
	"context"
	"os"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// CoreDNSRef is the CoreDNS image BuildCoreDNS makes.
const CoreDNSRef = "hostlet.local/coredns:v1"

// BuildCoreDNS builds the CoreDNS image into outDir: the busybox base and
// the static coredns binary (test/cluster/build.sh coredns) at /coredns,
// its entrypoint as in the upstream image. Reused while its inputs are
// unchanged.
func BuildCoreDNS(ctx context.Context, outDir, coredns string) (Image, error) {
	return busyboxWithBinary(ctx, outDir, CoreDNSRef, coredns, "coredns", ocispec.ImageConfig{
		Env:          []string{"PATH=" + defaultPath},
		Entrypoint:   []string{"/coredns"},
		ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}},
	})
}

// busyboxWithBinary builds image ref into outDir: the busybox base and the
// file bin as /name, with config. Reused while its inputs are unchanged
// (config is fixed per ref, so the ref stands for it in the key).
func busyboxWithBinary(ctx context.Context, outDir, ref, bin, name string, config ocispec.ImageConfig) (Image, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Image{}, err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return Image{}, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	return cachedImage(outDir, ref, []string{ref, sha256Hex(b), sha256Hex(busybox)}, func() (imageSpec, error) {
		base, err := makeBusyboxLayer(ctx, busybox)
		if err != nil {
			return imageSpec{}, err
		}
		top, err := buildLayer([]entry{file(name, 0o755, b)})
		if err != nil {
			return imageSpec{}, err
		}
		return imageSpec{ref: ref, layers: []layer{base, top}, config: config}, nil
	})
}
