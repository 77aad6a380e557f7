package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hostlet/hostlet/test/harness"
)

// -csi-hostpath: e2e.test's "[sig-storage] CSI Volumes [Driver:
// csi-hostpath]" testsuites. e2e.test deploys the driver itself from its
// embedded manifests (test/e2e/testing-manifests/storage-csi/hostpath:
// hostpathplugin, node-driver-registrar, livenessprobe, csi-attacher,
// csi-provisioner, csi-resizer, csi-snapshotter in one StatefulSet), with
// the node's --root-dir given as --kubelet-root-dir. The Go module proxy
// serves only some of those images' modules, so what runs under the
// upstream names is:
//   - csi-provisioner, csi-attacher and csi-snapshotter: upstream's own
//     sidecars (external-provisioner/v6, external-attacher/v4,
//     external-snapshotter/v8, built by test/cluster/build.sh), at the
//     served versions, not the manifest's; the run also installs the
//     VolumeSnapshot CRDs and runs upstream's snapshot-controller next to
//     the control plane (harness.StartSnapshotController);
//   - hostpathplugin, csi-node-driver-registrar, livenessprobe, csi-resizer:
//     STAND-INS of ours (test/images/cmd/...): hostlet's csihostdir test
//     driver under the upstream plugin's flags, and small mains implementing
//     the registrar's, the livenessprobe's and external-resizer's documented
//     behaviour (the resizer: controller expansion and the PVC's resize
//     status, no volume modification);
//
// Only a run with -csi-hostpath builds these (the usual run's cost stays
// what it was).

// csiHostpathPrefix is the testsuites' common name prefix.
const csiHostpathPrefix = "[sig-storage] CSI Volumes [Driver: csi-hostpath] "

const (
	kindHostpathPlugin imageKind = "hostpathplugin"
	kindRegistrar      imageKind = "csi-node-driver-registrar"
	kindLivenessProbe  imageKind = "livenessprobe"
	kindProvisioner    imageKind = "csi-provisioner"
	kindAttacher       imageKind = "csi-attacher"
	kindResizer        imageKind = "csi-resizer"
	kindSnapshotter    imageKind = "csi-snapshotter"
)

// csiImageKinds maps the manifest's sig-storage image names to their
// stand-ins; the health monitor is not listed, as e2e.test removes its
// container from the deployment.
var csiImageKinds = map[string]imageKind{
	"hostpathplugin":            kindHostpathPlugin,
	"csi-node-driver-registrar": kindRegistrar,
	"livenessprobe":             kindLivenessProbe,
	"csi-provisioner":           kindProvisioner,
	"csi-attacher":              kindAttacher,
	"csi-resizer":               kindResizer,
	"csi-snapshotter":           kindSnapshotter,
}

// csiHostpathNames is every test of the csi-hostpath testsuites.
func csiHostpathNames(all []listedTest) []string {
	var out []string
	for _, t := range all {
		if strings.HasPrefix(t.name, csiHostpathPrefix) {
			out = append(out, t.name)
		}
	}
	return out
}

// csiMockPrefix starts the names of the CSI mock specs: e2e.test serves
// the mock driver itself, through the hostpathplugin stand-in's proxy
// mode (test/e2e/testing-manifests/storage-csi/mock/csi-mock-proxy.yaml),
// with the same sidecar images as the hostpath deployment.
const csiMockPrefix = "[sig-storage] CSI Mock "

// csiMockNames is every CSI mock spec.
func csiMockNames(all []listedTest) []string {
	var out []string
	for _, t := range all {
		if strings.HasPrefix(t.name, csiMockPrefix) {
			out = append(out, t.name)
		}
	}
	return out
}

var manifestImageRE = regexp.MustCompile(`(?m)^\s*image:\s*(registry\.k8s\.io/sig-storage/([^:\s]+):\S+)\s*$`)

// csiManifestImages reads the images of the pinned release's hostpath
// deployment, so the stand-ins carry exactly the refs it names.
func csiManifestImages(manifest []byte) map[string]imageKind {
	out := map[string]imageKind{}
	for _, m := range manifestImageRE.FindAllSubmatch(manifest, -1) {
		if k, ok := csiImageKinds[string(m[2])]; ok {
			out[string(m[1])] = k
		}
	}
	return out
}

// csiRecipe is the recipe of -csi-hostpath's kinds, ok false for another
// kind. The driver's image has busybox (losetup, for block volumes) and
// runs privileged; the sidecars' need nothing but their binary.
func csiRecipe(kind imageKind, in imageInputs) (imageRecipe, bool) {
	bin, ok := in.csi[kind]
	if !ok {
		return imageRecipe{}, false
	}
	r := imageRecipe{config: defaultConfig()}
	name := string(kind)
	r.config.Entrypoint = []string{"/" + name}
	own := []layerEntry{{name: name, mode: 0o755, data: bin}}
	if kind == kindHostpathPlugin {
		own = append(own, in.csiLosetup...)
	}
	r.layers = [][]layerEntry{baseLayer(in), own}
	return r, true
}

// hostLosetup is util-linux's losetup of this machine with the libraries
// it links, as layer entries: the driver attaches block volumes' loop
// devices with `losetup -f --show` and finds them with `losetup -j`, which
// busybox's applet lacks. It goes to /usr/local/sbin, first in PATH.
func hostLosetup(ctx context.Context) ([]layerEntry, error) {
	return hostBinary(ctx, "losetup", "usr/local/sbin/losetup")
}

// hostBinary is this machine's program name with the libraries it links,
// as layer entries putting it at dest (relative to the root).
func hostBinary(ctx context.Context, name, dest string) ([]layerEntry, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s of this machine, for a stand-in image: %w", name, err)
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	entries := []layerEntry{{name: filepath.Dir(dest), mode: 0o755, dir: true}, {name: dest, mode: 0o755, data: data}}
	dirs := map[string]bool{}
	// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
	// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vdso has no file.
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>":
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0]
		}
		if !strings.HasPrefix(lib, "/") {
			continue
		}
		b, err := os.ReadFile(lib) // through symlinks: a regular file in the image
		if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(filepath.Clean(lib), "/")
		var parents []layerEntry
		for d := filepath.Dir(rel); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			parents = append([]layerEntry{{name: d, mode: 0o755, dir: true}}, parents...)
		}
		entries = append(append(entries, parents...), layerEntry{name: rel, mode: 0o755, data: b})
	}
	return entries, nil
}

// readCSIInputs finds the pinned release's hostpath manifest, builds the
// stand-ins and the upstream sidecars, and returns the refs to build.
func readCSIInputs(ctx context.Context, root, scratch string, in *imageInputs) (map[string]imageKind, error) {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	list.Dir = filepath.Join(root, "test", "cluster", "e2e")
	kdir, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m k8s.io/kubernetes (test/cluster/e2e): %w", err)
	}
	// The mock deployment's images are the hostpath one's today; read
	// both so a release that pins them apart still gets its stand-ins.
	wanted := map[string]imageKind{}
	manifests := filepath.Join(strings.TrimSpace(string(kdir)), "test/e2e/testing-manifests/storage-csi")
	mocks, err := filepath.Glob(filepath.Join(manifests, "mock", "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range append([]string{filepath.Join(manifests, "hostpath/hostpath/csi-hostpath-plugin.yaml")}, mocks...) {
		manifest, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for ref, k := range csiManifestImages(manifest) {
			wanted[ref] = k
		}
	}
	in.csi = map[imageKind][]byte{}
	for kind, pkg := range map[imageKind]string{kindHostpathPlugin: "./test/images/cmd/hostpathplugin",
		kindRegistrar: "./test/images/cmd/csi-node-driver-registrar", kindLivenessProbe: "./test/images/cmd/livenessprobe",
		kindResizer: "./test/images/cmd/csi-resizer"} {
		out := filepath.Join(scratch, string(kind))
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		if in.csi[kind], err = os.ReadFile(out); err != nil {
			return nil, err
		}
	}
	if in.csiLosetup, err = hostLosetup(ctx); err != nil {
		return nil, err
	}
	for _, kind := range []imageKind{kindProvisioner, kindAttacher, kindSnapshotter} {
		bin, err := harness.BuildComponent(ctx, logf, string(kind))
		if err != nil {
			return nil, err
		}
		if in.csi[kind], err = os.ReadFile(bin); err != nil {
			return nil, err
		}
	}
	return wanted, nil
}
