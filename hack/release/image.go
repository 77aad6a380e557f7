package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageBinary is where the image has hostlet: the chart's approver runs its
// entrypoint (charts/hostlet values servingCertApprover.image), as the test
// image of test/images BuildApprover does.
const imageBinary = "usr/local/bin/hostlet"

// annotationImageName is containerd's images.AnnotationImageName: with it
// `ctr images import` names the image by its full reference.
const annotationImageName = "io.containerd.image.name"

// imageArch is one platform's contents of the image.
type imageArch struct {
	arch              string
	binary, copyright []byte
}

// buildImage writes the multi-platform image of hostlet, ref, as a tarred
// OCI image layout (an oci-archive: skopeo, crane, regctl and ctr read it)
// at dst, without a container daemon: per platform one layer holding the
// static hostlet and its copyright file, nothing else (hostlet needs no
// shell, libc or CA bundle to approve CSRs with its service account). Layers,
// configs and the archive have fixed mtimes, owners and order, so the same
// binaries give the same digests.
func buildImage(work, dst, ref, tag string, v versions, epoch time.Time, arches []imageArch) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range arches {
		img, err := platformImage(a, v, epoch)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a.arch}},
		})
	}
	dir := filepath.Join(work, "image")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		ocispec.AnnotationRefName: tag,
		annotationImageName:       ref,
	})); err != nil {
		return fmt.Errorf("write the image layout: %w", err)
	}
	return tarDir(dir, dst, epoch)
}

func platformImage(a imageArch, v versions, epoch time.Time) (v1.Image, error) {
	gz, err := layerTarGz([]debFile{
		{imageBinary, 0o755, a.binary},
		{"usr/share/doc/hostlet/copyright", 0o644, a.copyright},
	}, epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: epoch}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: created, CreatedBy: "make release", Comment: "hostlet " + v.git,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", a.arch, created
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + imageBinary},
		// nobody, as the chart runs it; a node agent in a container would
		// run as root anyway (--user 0).
		User: "65534:65534",
		Labels: map[string]string{
			ocispec.AnnotationTitle:   "hostlet",
			ocispec.AnnotationVersion: v.git,
			ocispec.AnnotationSource:  "https://github.com/hostlet/hostlet",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// layerTarGz is a gzipped tar of files and their parent directories,
// sorted, root-owned, every mtime epoch.
func layerTarGz(files []debFile, epoch time.Time) ([]byte, error) {
	entries := map[string]*tar.Header{}
	data := map[string][]byte{}
	for _, f := range files {
		entries[f.path] = &tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: int64(f.mode), Size: int64(len(f.data)), ModTime: epoch}
		data[f.path] = f.data
		for d := filepath.Dir(f.path); d != "."; d = filepath.Dir(d) {
			entries[d] = &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	// "/" lowest, so every directory precedes its contents.
	key := func(s string) string { return strings.ReplaceAll(s, "/", "\x00") }
	sort.Slice(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		if err := tw.WriteHeader(entries[n]); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir tars the tree under dir to dst: sorted, directories before their
// contents, root-owned, every mtime epoch.
func tarDir(dir, dst string, epoch time.Time) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	}); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths { // WalkDir's lexical order: parents first
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			hdr = &tar.Header{Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !st.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
