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
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Image{}, err
	}
	bin, err := os.ReadFile(coredns)
	if err != nil {
		return Image{}, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	return cachedImage(outDir, CoreDNSRef, []string{CoreDNSRef, sha256Hex(bin), sha256Hex(busybox)}, func() (imageSpec, error) {
		base, err := makeBusyboxLayer(ctx, busybox)
		if err != nil {
			return imageSpec{}, err
		}
		dns, err := buildLayer([]entry{file("coredns", 0o755, bin)})
		if err != nil {
			return imageSpec{}, err
		}
		return imageSpec{ref: CoreDNSRef, layers: []layer{base, dns}, config: ocispec.ImageConfig{
			Env:          []string{"PATH=" + defaultPath},
			Entrypoint:   []string{"/coredns"},
			ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}},
		}}, nil
	})
}
