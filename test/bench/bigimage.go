package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The big image of the images scenario: a layer with the idle program
// (the bench's pause, at /idle, so it shares no layer with any image the
// nodes have) and data layers of dataFile-sized files, each layer at most
// layerBytes, together the size asked for. The data is a ChaCha8 stream
// of a fixed seed per layer: the same bytes every run (the same digests),
// and incompressible, so gzip leaves the layers as big as their files.
const (
	layerBytes = 100 << 20
	dataFile   = 10 << 20
)

// bigImageSpec says what to build; layer sizes are fields so a unit test
// builds a small one.
type bigImageSpec struct {
	total, perLayer, perFile int64
	idle                     []byte // the entrypoint program
}

// dataLayerTar writes data layer i (of size bytes) as a tar to w: files
// /data/<i>/<j>.bin, headers with fixed times.
func dataLayerTar(w io.Writer, i int, size, perFile int64) error {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i)+1)
	rnd := rand.NewChaCha8(seed)
	tw := tar.NewWriter(w)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Format = time.Unix(0, 0), tar.FormatPAX
		return tw.WriteHeader(h)
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: "data/", Mode: 0o755}); err != nil {
		return err
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("data/%d/", i), Mode: 0o755}); err != nil {
		return err
	}
	for j := 0; size > 0; j++ {
		n := min(size, perFile)
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/%d/%d.bin", i, j), Mode: 0o644, Size: n}); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, rnd, n); err != nil {
			return err
		}
		size -= n
	}
	return tw.Close()
}

// idleLayerTar is the layer with the entrypoint.
func idleLayerTar(exe []byte) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "idle", Mode: 0o755, Size: int64(len(exe)), ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(exe); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// builtImage is the image in one compression, its blobs in files under a
// directory (compressed once: go-containerregistry would compress again
// for the digest and for the push).
type builtImage struct {
	img ggcr.Image
	// layers are the blob digests of its layers, config not counted.
	layers []ggcr.Hash
	size   int64 // the layers' compressed bytes
}

// buildBigImage builds spec as plain gzip or as eStargz (the estargz
// package through go-containerregistry, as the lazy pull e2e test pushes
// it, its TOC digest annotated) under dir.
func buildBigImage(spec bigImageSpec, dir string, stargz bool) (*builtImage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	idle, err := idleLayerTar(spec.idle)
	if err != nil {
		return nil, err
	}
	tars := []func(io.Writer) error{func(w io.Writer) error { _, err := w.Write(idle); return err }}
	for i, left := 0, spec.total; left > 0; i++ {
		n := min(left, spec.perLayer)
		tars = append(tars, func(w io.Writer) error { return dataLayerTar(w, i, n, spec.perFile) })
		left -= n
	}
	var adds []mutate.Addendum
	out := &builtImage{}
	for i, write := range tars {
		l, ann, err := frozenLayer(filepath.Join(dir, fmt.Sprintf("layer%d", i)), write, stargz)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		sz, err := l.Size()
		if err != nil {
			return nil, err
		}
		out.layers, out.size = append(out.layers, d), out.size+sz
		adds = append(adds, mutate.Addendum{Layer: l, Annotations: ann, MediaType: types.OCILayer})
	}
	base := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config.Entrypoint = []string{"/idle"}
	if out.img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return out, nil
}

// frozenLayer writes a layer's tar to <path>.tar, compresses it once
// (gzip or eStargz, fastest level: the data is incompressible anyway) to
// <path>.gz and returns the layer read from that file, with its
// annotations (eStargz: the TOC digest).
func frozenLayer(path string, write func(io.Writer) error, stargz bool) (ggcr.Layer, map[string]string, error) {
	tarPath, gzPath := path+".tar", path+".gz"
	if err := writeFile(tarPath, write); err != nil {
		return nil, nil, err
	}
	defer os.Remove(tarPath)
	opts := []tarball.LayerOption{tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed)}
	if stargz {
		opts = append(opts, tarball.WithEstargz, tarball.WithEstargzOptions(estargz.WithCompressionLevel(gzip.BestSpeed)))
	}
	l, err := tarball.LayerFromFile(tarPath, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := writeFile(gzPath, func(w io.Writer) error {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(w, rc)
		return err
	}); err != nil {
		return nil, nil, err
	}
	var ann map[string]string
	if stargz {
		desc, err := partial.Descriptor(l)
		if err != nil {
			return nil, nil, err
		}
		if toc := desc.Annotations[estargz.TOCJSONDigestAnnotation]; toc != "" {
			ann = map[string]string{estargz.TOCJSONDigestAnnotation: toc}
		}
	}
	frozen, err := tarball.LayerFromFile(gzPath, tarball.WithMediaType(types.OCILayer))
	return frozen, ann, err
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pushImage uploads img to the registry at addr as repoTag and returns the
// ref to pull.
func pushImage(ctx context.Context, addr, repoTag string, img ggcr.Image) (string, error) {
	ref, err := name.ParseReference(addr+"/"+repoTag, name.Insecure, name.StrictValidation)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}
