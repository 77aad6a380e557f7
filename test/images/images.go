package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Refs of the images BuildAll produces.
const (
	BusyboxRef           = "hostlet.local/busybox:1.35"
	TestappRef           = "hostlet.local/testapp:v1"
	TestappStopSignalRef = "hostlet.local/testapp-stopsignal:v1"
)

// formatVersion is part of every cache key; bump it whenever the way images
// are assembled changes, so stale archives are not reused.
const formatVersion = "hostlet-images/1"

// keyLen is how many hex digits of the cache key name an archive.
const keyLen = 16

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image is one built image: its name and the OCI layout archive holding it.
type Image struct {
	Ref     string
	Archive string
}

// recipe says how to make one image out of the shared inputs.
type recipe struct {
	ref     string
	testapp bool // add the testapp layer on top of busybox
	config  ocispec.ImageConfig
}

func recipes() []recipe {
	testappConfig := func(stopSignal string) ocispec.ImageConfig {
		return ocispec.ImageConfig{
			Env:          []string{"PATH=" + defaultPath},
			Entrypoint:   []string{"/testapp"},
			ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}, "8082/tcp": {}},
			StopSignal:   stopSignal,
		}
	}
	return []recipe{
		{ref: BusyboxRef, config: ocispec.ImageConfig{Env: []string{"PATH=" + defaultPath}, Cmd: []string{"sh"}}},
		{ref: TestappRef, testapp: true, config: testappConfig("")},
		{ref: TestappStopSignalRef, testapp: true, config: testappConfig("SIGUSR1")},
	}
}

// BuildAll builds every test image into outDir (created if needed) and
// returns them in a fixed order. Archives whose inputs did not change are
// reused; the testapp binary is always compiled, which Go's build cache
// makes cheap.
func BuildAll(ctx context.Context, outDir string) ([]Image, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	busybox, err := readBusybox()
	if err != nil {
		return nil, err
	}
	testapp, err := buildTestapp(ctx)
	if err != nil {
		return nil, err
	}

	// Layers are built only on a cache miss, and at most once each.
	var busyboxLayer, testappLayer *layer
	getBusybox := func() (layer, error) {
		if busyboxLayer == nil {
			l, err := makeBusyboxLayer(ctx, busybox)
			if err != nil {
				return layer{}, err
			}
			busyboxLayer = &l
		}
		return *busyboxLayer, nil
	}
	getTestapp := func() (layer, error) {
		if testappLayer == nil {
			l, err := buildLayer([]entry{file("testapp", 0o755, testapp)})
			if err != nil {
				return layer{}, err
			}
			testappLayer = &l
		}
		return *testappLayer, nil
	}

	var out []Image
	for _, r := range recipes() {
		key, err := cacheKey(r, busybox, testapp)
		if err != nil {
			return nil, err
		}
		archive := filepath.Join(outDir, fileStem(r.ref)+"-"+key[:keyLen]+".tar")
		if _, err := os.Stat(archive); err != nil {
			spec := imageSpec{ref: r.ref, config: r.config}
			l, err := getBusybox()
			if err != nil {
				return nil, err
			}
			spec.layers = append(spec.layers, l)
			if r.testapp {
				if l, err = getTestapp(); err != nil {
					return nil, err
				}
				spec.layers = append(spec.layers, l)
			}
			if err := writeArchive(archive, spec); err != nil {
				return nil, fmt.Errorf("build %s: %w", r.ref, err)
			}
		}
		removeStale(outDir, r.ref, archive)
		out = append(out, Image{Ref: r.ref, Archive: archive})
	}
	return out, nil
}

// cacheKey hashes everything an image's archive depends on.
func cacheKey(r recipe, busybox, testapp []byte) (string, error) {
	cfg, err := json.Marshal(r.config)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", formatVersion, r.ref, cfg, sha256Hex(busybox))
	if r.testapp {
		fmt.Fprintf(h, "%s\n", sha256Hex(testapp))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileStem turns a ref into a file name prefix.
func fileStem(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(ref)
}

// removeStale deletes archives of ref built from older inputs, so outDir
// does not grow with every change to the testapp.
func removeStale(outDir, ref, keep string) {
	old, _ := filepath.Glob(filepath.Join(outDir, fileStem(ref)+"-"+strings.Repeat("?", keyLen)+".tar"))
	for _, p := range old {
		if p != keep {
			os.Remove(p)
		}
	}
}
