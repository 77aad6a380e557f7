package images

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// FlannelRef is the flannel image BuildFlannel makes.
const FlannelRef = "hostlet.local/flannel:v1"

// BuildFlannel builds the flannel image into outDir from the flannel CNI
// plugin and flanneld beside it (test/cluster/build.sh flannel): the busybox
// base, Debian's iptables (flanneld programs its forward and masquerade rules
// with it), flanneld at /opt/bin/flanneld as in upstream's flannel image and
// the plugin at /flannel as in upstream's flannel-cni-plugin image, so one
// image serves the DaemonSet's init containers and flanneld. Reused while
// its inputs are unchanged.
func BuildFlannel(ctx context.Context, outDir, plugin string) (Image, error) {
	flanneld := filepath.Join(filepath.Dir(plugin), "flanneld")
	files := map[string]string{"opt/bin/flanneld": flanneld, "flannel": plugin}
	return iptablesImage(ctx, outDir, FlannelRef, files, ocispec.ImageConfig{
		Env:        []string{"PATH=" + defaultPath},
		Entrypoint: []string{"/opt/bin/flanneld"},
	})
}

// iptablesImage builds image ref into outDir: the busybox base, Debian's
// iptables extracted from its packages (downloaded once with apt-get into
// outDir/debs) and files (path in the image: file on the host, executable),
// with config. Reused while its inputs are unchanged (config is fixed per
// ref, so the ref stands for it in the key).
func iptablesImage(ctx context.Context, outDir, ref string, files map[string]string, config ocispec.ImageConfig) (Image, error) {
	debs, err := downloadDebs(ctx, filepath.Join(outDir, "debs"), iptablesDebs)
	if err != nil {
		return Image{}, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return Image{}, err
	}
	inputs := []string{ref, sha256Hex(busybox), fmt.Sprintf("%q", iptablesTools)}
	var top []entry
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b, err := os.ReadFile(files[name])
		if err != nil {
			return Image{}, err
		}
		inputs = append(inputs, name, sha256Hex(b))
		top = append(top, file(name, 0o755, b))
	}
	for _, d := range debs {
		inputs = append(inputs, filepath.Base(d))
	}
	return cachedImage(outDir, ref, inputs, func() (imageSpec, error) {
		base, err := makeBusyboxLayer(ctx, busybox)
		if err != nil {
			return imageSpec{}, err
		}
		tools, err := debLayer(ctx, debs)
		if err != nil {
			return imageSpec{}, err
		}
		bins, err := buildLayer(top)
		if err != nil {
			return imageSpec{}, err
		}
		return imageSpec{ref: ref, layers: []layer{base, tools, bins}, config: config}, nil
	})
}
