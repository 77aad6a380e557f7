package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var (
	buildOnce  sync.Once
	built      []Image
	buildErr   error
	buildDir   string
	buildTaken time.Duration
)

// TestMain owns the directory the shared build goes to.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostlet-images-test-")
	if err != nil {
		panic(err)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildImages runs BuildAll once for all tests of the package.
func buildImages(t *testing.T) []Image {
	t.Helper()
	if _, err := os.Stat(busyboxPath); err != nil {
		t.Skipf("no busybox (apt-get install -y busybox-static): %v", err)
	}
	buildOnce.Do(func() {
		start := time.Now()
		built, buildErr = BuildAll(context.Background(), buildDir)
		buildTaken = time.Since(start)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func imageByRef(t *testing.T, imgs []Image, ref string) Image {
	t.Helper()
	for _, img := range imgs {
		if img.Ref == ref {
			return img
		}
	}
	t.Fatalf("no image %s in %v", ref, imgs)
	return Image{}
}

// readLayout unpacks an archive and returns the index's single manifest
// descriptor and its image, read back with go-containerregistry.
func readLayout(t *testing.T, archive string) (v1.Descriptor, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	if err := untar(archive, dir); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d manifests in index, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return im.Manifests[0], img
}

// rootFS flattens img into path -> header (and contents for regular files).
func rootFS(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		hdrs[name] = h
		if h.Typeflag == tar.TypeReg {
			if data[name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBuildAllImages(t *testing.T) {
	imgs := buildImages(t)
	t.Logf("BuildAll took %v", buildTaken)
	var refs []string
	for _, img := range imgs {
		refs = append(refs, img.Ref)
	}
	if want := []string{BusyboxRef, TestappRef, TestappStopSignalRef}; !reflect.DeepEqual(refs, want) {
		t.Fatalf("refs %v, want %v", refs, want)
	}

	for _, tc := range []struct {
		ref, tag   string
		entrypoint []string
		cmd        []string
		stopSignal string
		ports      int
	}{
		{BusyboxRef, "1.35", nil, []string{"sh"}, "", 0},
		{TestappRef, "v1", []string{"/testapp"}, nil, "", 3},
		{TestappStopSignalRef, "v1", []string{"/testapp"}, nil, "SIGUSR1", 3},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			desc, img := readLayout(t, imageByRef(t, imgs, tc.ref).Archive)
			if err := validate.Image(img); err != nil {
				t.Fatalf("invalid image: %v", err)
			}
			if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != tc.tag {
				t.Errorf("ref.name annotation %q, want %q", got, tc.tag)
			}
			if got := desc.Annotations["io.containerd.image.name"]; got != tc.ref {
				t.Errorf("containerd name annotation %q, want %q", got, tc.ref)
			}
			if desc.Platform == nil || desc.Platform.OS != "linux" {
				t.Errorf("platform %v", desc.Platform)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			c := cf.Config
			if !reflect.DeepEqual(c.Entrypoint, tc.entrypoint) || !reflect.DeepEqual(c.Cmd, tc.cmd) {
				t.Errorf("entrypoint %q cmd %q, want %q %q", c.Entrypoint, c.Cmd, tc.entrypoint, tc.cmd)
			}
			if c.StopSignal != tc.stopSignal {
				t.Errorf("stop signal %q, want %q", c.StopSignal, tc.stopSignal)
			}
			if len(c.ExposedPorts) != tc.ports {
				t.Errorf("exposed ports %v", c.ExposedPorts)
			}
			if !reflect.DeepEqual(c.Env, []string{"PATH=" + defaultPath}) {
				t.Errorf("env %q", c.Env)
			}
		})
	}
}

func TestBusyboxRootFS(t *testing.T) {
	_, img := readLayout(t, imageByRef(t, buildImages(t), BusyboxRef).Archive)
	hdrs, data := rootFS(t, img)
	for _, link := range []string{"bin/sh", "bin/ls", "usr/bin/env", "bin/sleep"} {
		if h := hdrs[link]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox" {
			t.Errorf("%s: %+v, want symlink to /bin/busybox", link, h)
		}
	}
	if h := hdrs["bin/busybox"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("bin/busybox: %+v", h)
	}
	if h := hdrs["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("tmp: %+v", h)
	}
	if h := hdrs["root"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("root: %+v", h)
	}
	for _, want := range []string{"root:x:0:0:", "nobody:x:65534:65534:", ":x:1000:1000:"} {
		if !bytes.Contains(data["etc/passwd"], []byte(want)) {
			t.Errorf("etc/passwd lacks %q:\n%s", want, data["etc/passwd"])
		}
	}
	for name, h := range hdrs {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d gid %d mtime %v", name, h.Uid, h.Gid, h.ModTime)
		}
	}
}

func TestTestappIsStatic(t *testing.T) {
	_, img := readLayout(t, imageByRef(t, buildImages(t), TestappRef).Archive)
	hdrs, data := rootFS(t, img)
	if hdrs["bin/sh"] == nil {
		t.Error("testapp image lacks the busybox layer")
	}
	bin := data["testapp"]
	if len(bin) == 0 || hdrs["testapp"].Mode&0o111 == 0 {
		t.Fatalf("no executable /testapp: %+v", hdrs["testapp"])
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("testapp has PT_INTERP: not static")
		}
	}
}

func TestBuildAllIsCachedAndReproducible(t *testing.T) {
	first := buildImages(t)
	stat := func(p string) os.FileInfo {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	before := map[string]os.FileInfo{}
	for _, img := range first {
		before[img.Archive] = stat(img.Archive)
	}

	again, err := BuildAll(context.Background(), buildDir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, first) {
		t.Fatalf("second build %v, first %v", again, first)
	}
	for _, img := range again {
		if fi := stat(img.Archive); !fi.ModTime().Equal(before[img.Archive].ModTime()) {
			t.Errorf("%s was rewritten", img.Archive)
		}
	}

	// A build from scratch elsewhere gives byte-identical archives.
	fresh, err := BuildAll(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range fresh {
		if filepath.Base(img.Archive) != filepath.Base(first[i].Archive) || fileSum(t, img.Archive) != fileSum(t, first[i].Archive) {
			t.Errorf("%s: rebuild differs: %s vs %s", img.Ref, img.Archive, first[i].Archive)
		}
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestLayerOrderAndParents(t *testing.T) {
	l, err := buildLayer([]entry{
		file("a-b/x", 0o644, []byte("1")),
		file("a/b/c", 0o644, []byte("2")),
		symlink("a/l", "/x"),
	})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(l.blob))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := []string{"a/", "a/b/", "a/b/c", "a/l", "a-b/", "a-b/x"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
	if _, err := buildLayer([]entry{dir("a", 0o755), dir("a", 0o700)}); err == nil {
		t.Error("duplicate entry accepted")
	}
}

func TestTagOf(t *testing.T) {
	for ref, want := range map[string]string{
		"hostlet.local/busybox:1.35": "1.35",
		"127.0.0.1:5000/app":         "",
		"127.0.0.1:5000/app:v2":      "v2",
		"app":                        "",
	} {
		if got := tagOf(ref); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", ref, got, want)
		}
	}
}
