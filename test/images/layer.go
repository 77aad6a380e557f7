package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// epoch is every file's mtime, so layers do not depend on when they were built.
var epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// entry is one file system object of a layer. Names are relative to the
// root, without leading or trailing slashes.
type entry struct {
	name string
	kind byte // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode int64
	data []byte // regular files
	link string // symlinks
}

func dir(name string, mode int64) entry { return entry{name: name, kind: tar.TypeDir, mode: mode} }
func file(name string, mode int64, data []byte) entry {
	return entry{name: name, kind: tar.TypeReg, mode: mode, data: data}
}
func symlink(name, target string) entry {
	return entry{name: name, kind: tar.TypeSymlink, mode: 0o777, link: target}
}

// layer is a built, gzip-compressed layer.
type layer struct {
	blob   []byte        // the compressed tar
	diffID digest.Digest // digest of the uncompressed tar
}

// buildLayer writes entries, plus any missing parent directories, as a
// deterministic tar and compresses it.
func buildLayer(entries []entry) (layer, error) {
	byName := map[string]entry{}
	for _, e := range entries {
		if _, dup := byName[e.name]; dup {
			return layer{}, fmt.Errorf("layer entry %q twice", e.name)
		}
		byName[e.name] = e
	}
	for _, e := range entries {
		for p := path.Dir(e.name); p != "."; p = path.Dir(p) {
			if _, ok := byName[p]; !ok {
				byName[p] = dir(p, 0o755)
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	// Compare with "/" lowest so every directory precedes its contents.
	key := func(s string) string { return strings.ReplaceAll(s, "/", "\x00") }
	sort.Slice(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, n := range names {
		e := byName[n]
		hdr := &tar.Header{
			Typeflag: e.kind,
			Name:     n,
			Linkname: e.link,
			Mode:     e.mode,
			ModTime:  epoch,
		}
		switch e.kind {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return layer{}, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return layer{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return layer{}, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return layer{}, err
	}
	if err := zw.Close(); err != nil {
		return layer{}, err
	}
	sum := sha256.Sum256(raw.Bytes())
	return layer{blob: gz.Bytes(), diffID: digest.NewDigestFromBytes(digest.SHA256, sum[:])}, nil
}
