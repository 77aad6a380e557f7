package images

import (
	"context"
	"os"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ApproverRepo and ApproverTag name the image BuildApprover makes (the
// chart's servingCertApprover.image).
const (
	ApproverRepo = "hostlet.local/hostlet"
	ApproverTag  = "dev"
	ApproverRef  = ApproverRepo + ":" + ApproverTag
)

// BuildApprover builds the image the chart runs `hostlet approve-serving`
// from into outDir: the busybox base and a static hostlet built from this
// checkout at /usr/local/bin/hostlet, its entrypoint. Reused while the
// binary is unchanged.
func BuildApprover(ctx context.Context, outDir string) (Image, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Image{}, err
	}
	bin, err := buildStatic(ctx, "./cmd/hostlet", HostletTags)
	if err != nil {
		return Image{}, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	return cachedImage(outDir, ApproverRef, []string{ApproverRef, sha256Hex(bin), sha256Hex(busybox)}, func() (imageSpec, error) {
		base, err := makeBusyboxLayer(ctx, busybox)
		if err != nil {
			return imageSpec{}, err
		}
		hostlet, err := buildLayer([]entry{file("usr/local/bin/hostlet", 0o755, bin)})
		if err != nil {
			return imageSpec{}, err
		}
		return imageSpec{ref: ApproverRef, layers: []layer{base, hostlet}, config: ocispec.ImageConfig{
			Env:        []string{"PATH=" + defaultPath},
			Entrypoint: []string{"/usr/local/bin/hostlet"},
		}}, nil
	})
}
