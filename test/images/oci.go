package images

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// annotationImageName is containerd's images.AnnotationImageName; with it on
// the index entry, ctr and the client's Import name the image by the full
// ref instead of prefixing the bare tag.
const annotationImageName = "io.containerd.image.name"

// imageSpec describes one image to assemble.
type imageSpec struct {
	ref    string
	layers []layer
	config ocispec.ImageConfig
}

// blob is content stored under blobs/sha256 in the layout.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{desc: ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, data: data}
}

func jsonBlob(mediaType string, v any) (blob, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	return newBlob(mediaType, b), nil
}

// tagOf returns the tag of a name:tag ref ("" when there is none).
func tagOf(ref string) string {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

// layoutFiles renders spec as the files of an OCI image layout.
func layoutFiles(spec imageSpec) (map[string][]byte, error) {
	platform := ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	created := epoch
	cfg := ocispec.Image{
		Created:  &created,
		Platform: platform,
		Config:   spec.config,
		RootFS:   ocispec.RootFS{Type: "layers"},
	}
	var blobs []blob
	var layerDescs []ocispec.Descriptor
	for _, l := range spec.layers {
		b := newBlob(ocispec.MediaTypeImageLayerGzip, l.blob)
		blobs = append(blobs, b)
		layerDescs = append(layerDescs, b.desc)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
	}
	cfgBlob, err := jsonBlob(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return nil, err
	}
	manifest, err := jsonBlob(ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgBlob.desc,
		Layers:    layerDescs,
	})
	if err != nil {
		return nil, err
	}
	blobs = append(blobs, cfgBlob, manifest)

	mdesc := manifest.desc
	mdesc.Platform = &platform
	mdesc.Annotations = map[string]string{
		ocispec.AnnotationRefName: tagOf(spec.ref),
		annotationImageName:       spec.ref,
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{mdesc},
	})
	if err != nil {
		return nil, err
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		ocispec.ImageLayoutFile: layout,
		ocispec.ImageIndexFile:  index,
	}
	for _, b := range blobs {
		files[path.Join(ocispec.ImageBlobsDir, b.desc.Digest.Algorithm().String(), b.desc.Digest.Encoded())] = b.data
	}
	return files, nil
}

// writeArchive tars the layout of spec to path, atomically so an
// interrupted build never leaves a cache hit behind.
func writeArchive(path string, spec imageSpec) (err error) {
	files, err := layoutFiles(spec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".partial-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := tar.NewWriter(tmp)
	// Directories first, then files in name order: deterministic output.
	for _, d := range []string{ocispec.ImageBlobsDir + "/", ocispec.ImageBlobsDir + "/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("store %s: %w", path, err)
	}
	return nil
}
