package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hostlet/hostlet/test/images"
)

// imageFormat is part of every image's cache key: bump it when the way the
// images are assembled changes.
const imageFormat = "hostlet-conformance-images/2"

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// The users and groups of upstream's busybox image; agnhost (Alpine-based
// upstream) adds user 1000 in group 50000, which the supplemental-groups
// tests look up.
const (
	basePasswd = "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\n" +
		"bin:x:2:2:bin:/bin:/bin/false\nsys:x:3:3:sys:/dev:/bin/false\nmail:x:8:8:mail:/var/spool/mail:/bin/false\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/false\noperator:x:37:37:Operator:/var:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/home:/bin/false\n"
	baseGroup = "root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nwheel:x:10:root\n" +
		"mail:x:8:\nwww-data:x:33:\noperator:x:37:\nstaff:x:50:\nusers:x:100:\nnogroup:x:65534:\n"
	agnhostUser  = "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
	agnhostGroup = "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
	// bashShim: upstream agnhost has bash; probe tests run /bin/bash -c.
	bashShim = "#!/bin/sh\nexec /bin/sh \"$@\"\n"
)

// imageInputs are the files the images are made of.
type imageInputs struct {
	busybox, agnhost, nnp, curl, nc, pause, nmeter []byte
	dig, getent                                    []byte // test/images/cmd: the DNS probe pods' tools
	// agnhostBusybox is busybox without its nc applet (see renameApplet).
	agnhostBusybox []byte
	// dnsutilsBusybox is busybox without its dd applet, dd coreutils' dd
	// of this machine at bin/dd (hostBinary).
	dnsutilsBusybox []byte
	dd              []layerEntry
	cert, key       []byte
	applets         []string // busybox applet paths, e.g. "bin/sh"
	// fakeRegistry is agnhost's /var/registry (fakeRegistryLayer).
	fakeRegistry []layerEntry
	// -full's (readFullInputs).
	sampleAPIServer, etcd []byte
	updateDemo            map[imageKind][]namedFile // kitten's and nautilus's files
	// -csi-hostpath's (readCSIInputs): each kind's one binary.
	csi        map[imageKind][]byte
	csiLosetup []layerEntry // hostLosetup
}

// imageKind says which stand-in serves an upstream image repository.
type imageKind string

const (
	kindAgnhost    imageKind = "agnhost"
	kindBusybox    imageKind = "busybox"
	kindPause      imageKind = "pause"
	kindNonewprivs imageKind = "nonewprivs"
	kindNonroot    imageKind = "nonroot"
	kindNginx      imageKind = "nginx"
	kindDNSUtils   imageKind = "jessie-dnsutils"
)

// upstreamImageRE picks the images of e2e.test --list-images that the node
// tests use and that can be built here.
var upstreamImageRE = regexp.MustCompile(`^registry\.k8s\.io/(?:e2e-test-images/(agnhost|busybox|nonewprivs|nonroot|nginx|jessie-dnsutils)|(pause)):[^/]+$`)

// wantedImages maps each buildable ref of the list to its kind.
func wantedImages(list []string) map[string]imageKind {
	out := map[string]imageKind{}
	for _, ref := range list {
		if m := upstreamImageRE.FindStringSubmatch(strings.TrimSpace(ref)); m != nil {
			out[m[0]] = imageKind(m[1] + m[2])
		}
	}
	return out
}

// layerEntry is one file system object; name is relative to the root.
type layerEntry struct {
	name string
	mode int64
	data []byte // regular file
	link string // symlink target
	dir  bool
}

// imageRecipe is an image of one kind: its layers and config.
type imageRecipe struct {
	layers [][]layerEntry
	config v1.Config
}

func recipeFor(kind imageKind, in imageInputs) imageRecipe {
	if r, ok := fullRecipe(kind, in); ok {
		return r
	}
	if r, ok := csiRecipe(kind, in); ok {
		return r
	}
	base := baseLayer(in)
	cfg := defaultConfig()
	switch kind {
	case kindBusybox:
		cfg.Cmd = []string{"sh"}
		return imageRecipe{[][]layerEntry{base}, cfg}
	case kindAgnhost, kindNginx:
		cfg.Entrypoint = []string{"/agnhost"}
		cfg.Cmd = []string{"pause"}
		cfg.ExposedPorts = map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}
		if kind == kindNginx {
			// A stand-in: the tests only need a different image that
			// serves HTTP on port 80.
			cfg.Entrypoint = []string{"/agnhost", "test-webserver", "--port=80"}
			cfg.Cmd = nil
		}
		return imageRecipe{[][]layerEntry{base, agnhostLayer(in)}, cfg}
	case kindDNSUtils:
		// Upstream: Debian jessie with dnsutils; the DNS specs run
		// `sh -c` scripts of dig, getent, test, seq and sleep in it, the
		// storage testsuites' pods (e2epod.MakeSecPod) write block
		// volumes with `dd ... oflag=nocache`, which only coreutils' dd
		// knows: Debian's is there, and busybox without its own applet,
		// whose sh would run it first.
		cfg.Cmd = []string{"/bin/bash"}
		own := append(dnsToolsLayer(in), layerEntry{name: "bin/bash", mode: 0o755, data: []byte(bashShim)},
			layerEntry{name: "bin/busybox", mode: 0o755, data: in.dnsutilsBusybox})
		return imageRecipe{[][]layerEntry{base, append(own, in.dd...)}, cfg}
	case kindNonewprivs:
		cfg.Cmd = []string{"nnp"}
		return imageRecipe{[][]layerEntry{base, {
			{name: "usr/local/bin/nnp", mode: 0o4755, data: in.nnp},
		}}, cfg}
	case kindNonroot:
		cfg.User = "1234"
		return imageRecipe{[][]layerEntry{base}, cfg}
	case kindPause:
		cfg.Entrypoint = []string{"/pause"}
		cfg.User = "65535:65535"
		return imageRecipe{[][]layerEntry{{{name: "pause", mode: 0o755, data: in.pause}}}, cfg}
	}
	panic("unknown image kind " + kind)
}

func defaultConfig() v1.Config { return v1.Config{Env: []string{pathEnv}} }

// baseLayer is a busybox root file system with every applet linked.
func baseLayer(in imageInputs) []layerEntry {
	l := []layerEntry{}
	for _, d := range []string{"bin", "dev", "etc", "home", "proc", "root", "run", "sbin", "sys", "tmp", "usr", "usr/bin",
		"usr/sbin", "usr/local", "usr/local/bin", "var", "var/run"} {
		mode := int64(0o755)
		switch d {
		case "tmp":
			mode = 0o1777
		case "root":
			mode = 0o700
		}
		l = append(l, layerEntry{name: d, mode: mode, dir: true})
	}
	l = append(l,
		layerEntry{name: "bin/busybox", mode: 0o755, data: in.busybox},
		layerEntry{name: "etc/passwd", mode: 0o644, data: []byte(basePasswd)},
		layerEntry{name: "etc/group", mode: 0o644, data: []byte(baseGroup)},
		// Upstream's busybox has the nmeter applet, Debian's not: the
		// node e2e suite's lifecycle specs time their log lines with it.
		layerEntry{name: "bin/nmeter", mode: 0o755, data: in.nmeter},
	)
	// Upstream's busybox image has every applet in /bin (tests run
	// /bin/sysctl); Debian's own paths (sbin/sysctl, usr/bin/env) stay too.
	linked := map[string]bool{"bin/busybox": true}
	for _, a := range in.applets {
		for _, p := range []string{"bin/" + path.Base(a), a} {
			if !linked[p] {
				linked[p] = true
				l = append(l, layerEntry{name: p, mode: 0o777, link: "/bin/busybox"})
			}
		}
	}
	return l
}

// agnhostLayer adds what upstream's Alpine-based agnhost image has and
// the tests rely on.
func agnhostLayer(in imageInputs) []layerEntry {
	return append([]layerEntry{
		{name: "agnhost", mode: 0o755, data: in.agnhost},
		{name: "agnhost-2", mode: 0o777, link: "agnhost"},
		{name: "localhost.crt", mode: 0o644, data: in.cert},
		{name: "localhost.key", mode: 0o644, data: in.key},
		{name: "uploads", mode: 0o755, dir: true},
		{name: "bin/bash", mode: 0o755, data: []byte(bashShim)},
		{name: "usr/bin/curl", mode: 0o755, data: in.curl},
		// netcat-openbsd's client flags (-v, -t, -u), which busybox's nc
		// lacks; its shell would run its own applet whatever PATH says.
		{name: "bin/busybox", mode: 0o755, data: in.agnhostBusybox},
		{name: "usr/bin/nc", mode: 0o755, data: in.nc},
		{name: "bin/nc", mode: 0o777, link: "/usr/bin/nc"},
		{name: "etc/passwd", mode: 0o644, data: []byte(basePasswd + agnhostUser)},
		{name: "etc/group", mode: 0o644, data: []byte(baseGroup + agnhostGroup)},
		{name: "home/user-defined-in-image", mode: 0o755, dir: true},
	}, append(dnsToolsLayer(in), in.fakeRegistry...)...)
}

// fakeRegistryLayer is the /var/registry upstream's agnhost image serves
// with `fake-registry-server` (its Dockerfile copies pause 3.10.1 there as
// pause:testing: test/images/agnhost/fakeregistryserver): the pause
// stand-in in that layout, <image>/manifests/<tag> holding the manifest's
// digest, <image>/manifests/<digest> and <image>/blobs/<digest>. The
// suites' private registry specs pull localhost:5000/pause:testing from it
// (e2eregistry.SetupRegistry); without it they fail on any node.
func fakeRegistryLayer(in imageInputs) ([]layerEntry, error) {
	img, _, err := assemble(recipeFor(kindPause, in), []string{"localhost:5000/pause:testing"})
	if err != nil {
		return nil, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	const dir = "var/registry/pause"
	l := []layerEntry{
		{name: "var/registry", mode: 0o755, dir: true},
		{name: dir, mode: 0o755, dir: true},
		{name: dir + "/manifests", mode: 0o755, dir: true},
		{name: dir + "/blobs", mode: 0o755, dir: true},
		{name: dir + "/manifests/testing", mode: 0o644, data: []byte(digest.String() + "\n")},
		{name: dir + "/manifests/" + digest.String(), mode: 0o644, data: manifest},
		{name: dir + "/blobs/" + configName.String(), mode: 0o644, data: config},
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, layer := range layers {
		d, err := layer.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		l = append(l, layerEntry{name: dir + "/blobs/" + d.String(), mode: 0o644, data: b})
	}
	return l, nil
}

// dnsToolsLayer is the dig (bind-tools, dnsutils) and getent (libc) that
// the DNS specs' probe containers run in agnhost and jessie-dnsutils.
func dnsToolsLayer(in imageInputs) []layerEntry {
	return []layerEntry{
		{name: "usr/bin/dig", mode: 0o755, data: in.dig},
		{name: "usr/bin/getent", mode: 0o755, data: in.getent},
	}
}

// epoch is every entry's mtime, so archives depend only on their inputs.
var epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// tarLayer renders entries in order (parents must come first) as an
// uncompressed tar; the images stay local, so compression buys nothing.
func tarLayer(entries []layerEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Name, hdr.Size = tar.TypeDir, e.name+"/", 0
		case e.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	err := tw.Close()
	return buf.Bytes(), err
}

// builtImage is one archive and the refs it holds.
type builtImage struct {
	refs    []string
	archive string
}

// buildImages writes one docker-archive per image ref into dir (reused
// when its inputs are unchanged) and returns them. Refs of the same kind
// (agnhost 2.55 and 2.59, say) are the same files but each its own image
// (a label names the ref), as upstream's are: a spec that removes one
// (CRI RemoveImage, which takes every name of an image) leaves the other.
func buildImages(wanted map[string]imageKind, in imageInputs, dir string) ([]builtImage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	byKind := map[imageKind][]string{}
	for ref, k := range wanted {
		byKind[k] = append(byKind[k], ref)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	var out []builtImage
	keep := map[string]bool{}
	for _, k := range kinds {
		refs := byKind[imageKind(k)]
		sort.Strings(refs)
		recipe := recipeFor(imageKind(k), in)
		for _, ref := range refs {
			img, key, err := assemble(recipe, []string{ref})
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", ref, err)
			}
			archive := filepath.Join(dir, k+"-"+key[:16]+".tar")
			keep[archive] = true
			if _, err := os.Stat(archive); err != nil {
				if err := writeDockerArchive(archive, []string{ref}, img); err != nil {
					return nil, fmt.Errorf("image %s: %w", ref, err)
				}
			}
			out = append(out, builtImage{refs: []string{ref}, archive: archive})
		}
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	for _, p := range outdated(old, keep, byKind) {
		os.Remove(p)
	}
	return out, nil
}

// outdated are the archives (<kind>-<key>.tar) of older inputs: another
// key of a kind built now. A kind not wanted now stays: the node-level
// selection wants fewer than -full's, and a run of the one must not remove
// what a run of the other (maybe at the same time, on the same cache) uses.
func outdated(archives []string, keep map[string]bool, built map[imageKind][]string) []string {
	var out []string
	for _, p := range archives {
		name := strings.TrimSuffix(filepath.Base(p), ".tar")
		i := strings.LastIndex(name, "-")
		if keep[p] || i < 0 {
			continue
		}
		if _, ok := built[imageKind(name[:i])]; ok {
			out = append(out, p)
		}
	}
	return out
}

// assemble makes the image and its cache key (which covers the refs, the
// config and every layer's content).
func assemble(r imageRecipe, refs []string) (v1.Image, string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", imageFormat, strings.Join(refs, ","))
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, entries := range r.layers {
		b, err := tarLayer(entries)
		if err != nil {
			return nil, "", err
		}
		h.Write(b)
		if img, err = mutate.AppendLayers(img, static.NewLayer(b, types.OCIUncompressedLayer)); err != nil {
			return nil, "", err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, v1.Time{Time: epoch}
	cf.Config = r.config
	cf.Config.Labels = map[string]string{}
	for k, v := range r.config.Labels {
		cf.Config.Labels[k] = v
	}
	// Each ref its own image ID (see buildImages).
	cf.Config.Labels["org.hostlet.stand-in-for"] = strings.Join(refs, ",")
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, "", err
	}
	cfg, err := json.Marshal(cf)
	if err != nil {
		return nil, "", err
	}
	h.Write(cfg)
	return img, hex.EncodeToString(h.Sum(nil)), nil
}

// writeDockerArchive writes img under every ref (docker save format, which
// containerd's import names by its RepoTags), atomically.
func writeDockerArchive(path string, refs []string, img v1.Image) error {
	m := map[name.Reference]v1.Image{}
	for _, r := range refs {
		tag, err := name.NewTag(r, name.StrictValidation)
		if err != nil {
			return err
		}
		m[tag] = img
	}
	tmp := path + ".partial"
	if err := tarball.MultiRefWriteToFile(tmp, m); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// readImageInputs gathers the binaries: busybox from Debian's
// busybox-static (its sh made to keep every environment variable), agnhost, nnp and the porter certificate from the tools
// dir (test/cluster/e2e/build.sh), curl, nc and pause (test/conformance), dig and
// getent (test/images/cmd) built from this module.
func readImageInputs(ctx context.Context, root, tools, scratch string) (imageInputs, error) {
	var in imageInputs
	var err error
	read := func(dst *[]byte, path string) {
		if err == nil {
			*dst, err = os.ReadFile(path)
		}
	}
	read(&in.busybox, "/usr/bin/busybox")
	read(&in.agnhost, filepath.Join(tools, "agnhost"))
	read(&in.nnp, filepath.Join(tools, "nnp"))
	read(&in.cert, filepath.Join(tools, "localhost.crt"))
	read(&in.key, filepath.Join(tools, "localhost.key"))
	if err != nil {
		return in, fmt.Errorf("image inputs (busybox-static installed? build.sh run?): %w", err)
	}
	for _, p := range []struct {
		dst *[]byte
		pkg string
	}{{&in.curl, "./test/conformance/curl"}, {&in.nc, "./test/conformance/nc"}, {&in.pause, "./test/conformance/pause"},
		{&in.nmeter, "./test/conformance/nmeter"},
		{&in.dig, "./test/images/cmd/dig"}, {&in.getent, "./test/images/cmd/getent"}} {
		out := filepath.Join(scratch, filepath.Base(p.pkg))
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, p.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return in, fmt.Errorf("go build %s: %w\n%s", p.pkg, err, b)
		}
		if *p.dst, err = os.ReadFile(out); err != nil {
			return in, err
		}
	}
	// Upstream's busybox sh passes environment variables of any name on
	// (the ConfigMap and Secret env specs); Debian's build does not.
	if in.busybox, err = images.KeepBadEnvNames(in.busybox); err != nil {
		return in, err
	}
	if in.agnhostBusybox, err = renameApplet(in.busybox, "nameif", "nc", "nd", "netstat"); err != nil {
		return in, err
	}
	if in.dnsutilsBusybox, err = renameApplet(in.busybox, "dc", "dd", "de", "deallocvt"); err != nil {
		return in, err
	}
	if in.dd, err = hostBinary(ctx, "dd", "bin/dd"); err != nil {
		return in, err
	}
	if in.fakeRegistry, err = fakeRegistryLayer(in); err != nil {
		return in, err
	}
	list, err := exec.CommandContext(ctx, "/usr/bin/busybox", "--list-full").Output()
	if err != nil {
		return in, fmt.Errorf("busybox --list-full: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		// Directories come from baseLayer; usr/local/bin has no applets.
		if a := strings.Trim(sc.Text(), "/ "); a != "" && a != "bin/busybox" {
			in.applets = append(in.applets, a)
		}
	}
	return in, nil
}

// renameApplet returns busybox with its applet name renamed repl, so a
// program of that name in the image runs instead. Debian's static busybox
// is built with FEATURE_SH_STANDALONE: its sh runs an applet of the name
// before searching PATH, so without this `nc` in a script would never
// reach the image's /usr/bin/nc. The applet names are one sorted
// NUL-separated table that busybox binary-searches: repl must keep the
// order between the names prev and next around it ("nameif" < "nd" <
// "netstat").
func renameApplet(busybox []byte, prev, name, repl, next string) ([]byte, error) {
	if !(prev < repl && repl < next) {
		return nil, fmt.Errorf("busybox: applet %q renamed %q breaks the table's order", name, repl)
	}
	old := []byte("\x00" + prev + "\x00" + name + "\x00" + next + "\x00")
	if n := bytes.Count(busybox, old); n != 1 {
		return nil, fmt.Errorf("busybox: the applet table entry %q appears %d times, want once", old, n)
	}
	return bytes.Replace(busybox, old, []byte("\x00"+prev+"\x00"+repl+"\x00"+next+"\x00"), 1), nil
}
