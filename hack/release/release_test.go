package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct{ git, deb, chart string }{
		{"v1.2.0", "1.2.0", "1.2.0"},
		{"v1.2.0-dirty", "1.2.0+dirty", "1.2.0-dirty"},
		{"v1.2.0-3-g0123456789ab", "1.2.0+3.g0123456789ab", "1.2.0-3-g0123456789ab"},
		{"v0.0.0-354-g0e915de7864d-dirty", "0.0.0+354.g0e915de7864d.dirty", "0.0.0-354-g0e915de7864d-dirty"},
		{"v1.2.0-rc.1", "1.2.0~rc.1", "1.2.0-rc.1"},
		{"v1.2.0-rc.1-3-gabcdef1", "1.2.0~rc.1+3.gabcdef1", "1.2.0-rc.1-3-gabcdef1"},
	} {
		v, err := parseVersion(tc.git)
		if err != nil {
			t.Errorf("%s: %v", tc.git, err)
			continue
		}
		if v.deb != tc.deb || v.chart != tc.chart {
			t.Errorf("%s: deb %q chart %q, want %q %q", tc.git, v.deb, v.chart, tc.deb, tc.chart)
		}
	}
	for _, bad := range []string{"", "dev", "1.2.0", "v1.2", "v01.2.0", "v1.2.0-rc-1", "0e915de7864d", "v1.2.0+meta", "v1.2.0 "} {
		if _, err := parseVersion(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// dpkg orders the versions as their commits: a pre-release before its
// release, a build after its tag before the next, dirty after clean.
func TestDebVersionsOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg")
	}
	order := []string{"v0.0.0-9-gabcdef1", "v0.0.0-10-gabcdef1", "v0.0.0-10-gabcdef1-dirty", "v1.0.0-rc.1", "v1.0.0-rc.1-2-gabcdef1", "v1.0.0", "v1.0.0-1-gabcdef1"}
	for i := 1; i < len(order); i++ {
		a, _ := parseVersion(order[i-1])
		b, _ := parseVersion(order[i])
		if err := exec.Command("dpkg", "--compare-versions", a.deb, "lt", b.deb).Run(); err != nil {
			t.Errorf("dpkg: not %s < %s (%s, %s)", a.deb, b.deb, order[i-1], order[i])
		}
	}
}

// The release of this checkout, built twice, is the same bytes; its
// binaries are static and stripped and print their version; each .deb holds
// what it should, root-owned, and unpacks into a fresh dpkg root, where
// dpkg verifies its checksums; the image holds the binaries for both
// platforms and goes into a registry (a loopback one) as is; the chart
// renders the approver with that image. Two builds take minutes (xz of the
// packages mostly): only with HOSTLET_RELEASE_TEST=1 (make release-test).
// TestPrermDowngrade runs the package's prerm as dpkg does on a downgrade
// (the installed package's `upgrade <older>`, then the older package's
// `failed-upgrade <newer>`) and on upgrades, in a $DPKG_ROOT with and
// without join's unit: only a downgrade of a joined host is refused, and
// HOSTLET_ALLOW_DOWNGRADE=1 lets it through.
func TestPrermDowngrade(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg")
	}
	const older, newer = "0.0.0+400.g1234567890ab", "0.0.0+412.gba0987654321"
	dir := t.TempDir()
	script := func(version string) string {
		p := filepath.Join(dir, "prerm-"+version)
		if err := os.WriteFile(p, []byte(fmt.Sprintf(prermTemplate, version)), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	olderScript, newerScript := script(older), script(newer)
	joined, fresh := filepath.Join(dir, "joined"), filepath.Join(dir, "fresh")
	unit := filepath.Join(joined, "etc/systemd/system/hostlet.service")
	if err := os.MkdirAll(filepath.Dir(unit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script, action, version, root, allow string
		refused                                    bool
	}{
		{"downgrade, joined", newerScript, "upgrade", older, joined, "", true},
		{"downgrade, joined, fallback", olderScript, "failed-upgrade", newer, joined, "", true},
		{"downgrade, joined, allowed", newerScript, "upgrade", older, joined, "1", false},
		{"downgrade, joined, allowed, fallback", olderScript, "failed-upgrade", newer, joined, "1", false},
		{"downgrade, never joined", newerScript, "upgrade", older, fresh, "", false},
		{"upgrade, joined", olderScript, "upgrade", newer, joined, "", false},
		{"upgrade, joined, fallback", newerScript, "failed-upgrade", older, joined, "", false},
		{"reinstall, joined", newerScript, "upgrade", newer, joined, "", false},
		{"remove, joined", newerScript, "remove", "", joined, "", false},
	} {
		cmd := exec.Command("sh", tc.script, tc.action, tc.version)
		cmd.Env = append(os.Environ(), "DPKG_ROOT="+tc.root, "HOSTLET_ALLOW_DOWNGRADE="+tc.allow)
		out, err := cmd.CombinedOutput()
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%s: prerm %s %s: refused %v, want %v: %v\n%s", tc.name, tc.action, tc.version, refused, tc.refused, err, out)
		}
		if tc.refused && !strings.Contains(string(out), "refusing to downgrade hostlet "+newer+" to "+older) {
			t.Errorf("%s: prerm says:\n%s", tc.name, out)
		}
	}
}

func TestRelease(t *testing.T) {
	if os.Getenv("HOSTLET_RELEASE_TEST") == "" {
		t.Skip("HOSTLET_RELEASE_TEST=1 (make release-test) builds the release twice, minutes")
	}
	for _, tool := range []string{"dpkg-deb", "dpkg", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	helm, err := harness.BuildHelm(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack/release/version.sh")).Output()
	if err != nil {
		t.Fatalf("version.sh: %v", err)
	}
	version := strings.TrimSpace(string(out))
	out, err = exec.Command("git", "-C", root, "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	const repo = "registry.example:5000/team/hostlet"
	build := func(out string) string {
		t0 := time.Now()
		dir, err := release(ctx, config{
			root: root, out: out, version: version, epoch: epoch, imageRepo: repo, helm: helm,
			arches: []string{"amd64", "arm64"}, maintainer: "test <test@hostlet.invalid>", log: testLog{t},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("release in %v", time.Since(t0).Round(time.Second))
		return dir
	}
	tmp := t.TempDir()
	// The second build relinks from the first one's compile cache; `make
	// release` with an empty GOCACHE gave the same sums (see the report of
	// the commit adding this).
	a, b := build(filepath.Join(tmp, "a")), build(filepath.Join(tmp, "b"))
	sums, err := os.ReadFile(filepath.Join(a, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if other, _ := os.ReadFile(filepath.Join(b, "SHA256SUMS")); !bytes.Equal(sums, other) {
		t.Fatalf("two builds of one commit differ:\n%s\n%s", sums, other)
	}
	t.Logf("SHA256SUMS:\n%s", sums)

	v, _ := parseVersion(version)
	want := map[string]bool{
		"hostlet-" + v.git + "-linux-amd64": true, "hostlet-" + v.git + "-linux-arm64": true,
		"hostlet_" + v.deb + "_amd64.deb": true, "hostlet_" + v.deb + "_arm64.deb": true,
		"hostlet-image-" + v.git + ".oci.tar": true, "hostlet-" + v.chart + ".tgz": true,
	}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || !want[file] {
			t.Errorf("SHA256SUMS: unexpected line %q", line)
			continue
		}
		delete(want, file)
		if got := fileSum(t, filepath.Join(a, file)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", file, got, sum)
		}
	}
	if len(want) > 0 {
		t.Errorf("not in the release: %v", want)
	}

	binaries := map[string][]byte{}
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(a, "hostlet-"+v.git+"-linux-"+arch)
		checkBinary(t, bin, arch, v.git)
		binaries[arch], _ = os.ReadFile(bin)
		checkDeb(t, filepath.Join(a, "hostlet_"+v.deb+"_"+arch+".deb"), arch, v, binaries[arch])
	}
	checkImage(ctx, t, filepath.Join(a, "hostlet-image-"+v.git+".oci.tar"), repo+":"+v.git, time.Unix(epoch, 0), binaries)
	checkChart(t, helm, filepath.Join(a, "hostlet-"+v.chart+".tgz"), repo, v)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkBinary: an ELF of arch with no interpreter (static) and no symbol
// table (stripped), built without cgo and paths, and, on this machine's
// architecture, `hostlet version` printing the release's version.
func checkBinary(t *testing.T, path, arch, version string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an interpreter: not static", path)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s: has a symbol table: not stripped", path)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "-tags": images.HostletTags, "GOARCH": arch} {
		if settings[k] != want {
			t.Errorf("%s: build setting %s=%q, want %q", path, k, settings[k], want)
		}
	}
	if arch != goruntime.GOARCH {
		return
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "hostlet "+version+" ") {
		t.Errorf("%s version: %v: %q, want hostlet %s", path, err, out, version)
	}
}

// checkDeb: the package's fields and files (dpkg-deb -f, -c), and an
// unpack into a fresh dpkg root (no maintainer script runs: the package has
// no preinst and --unpack does not configure), where the binary is the
// release's and dpkg --verify finds every file as its md5sums say.
func checkDeb(t *testing.T, deb, arch string, v versions, binary []byte) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	fields := run("dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Depends", "Recommends")
	for _, want := range []string{"Package: hostlet\n", "Version: " + v.deb + "\n", "Architecture: " + arch + "\n",
		"Depends: " + debDepends + "\n", "Recommends: " + debRecommends + "\n"} {
		if !strings.Contains(fields, want) {
			t.Errorf("%s: no %q in its control:\n%s", deb, want, fields)
		}
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(run("dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "root/root" {
			t.Errorf("%s: not root-owned: %s", deb, line)
			continue
		}
		if f[0][0] == '-' {
			files = append(files, f[0]+" "+f[5])
		}
	}
	wantFiles := "-rwxr-xr-x ./usr/bin/hostlet,-rw-r--r-- ./usr/lib/modules-load.d/hostlet.conf," +
		"-rw-r--r-- ./usr/lib/sysctl.d/60-hostlet.conf,-rw-r--r-- ./usr/share/doc/hostlet/copyright"
	if got := strings.Join(files, ","); got != wantFiles {
		t.Errorf("%s files:\n%s\nwant:\n%s", deb, got, wantFiles)
	}

	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// --force-architecture: the other architecture's package too (it
		// unpacks the same; nothing of it runs).
		run("dpkg", "--root="+root, "--log=/dev/null", "--force-architecture", "--unpack", deb)
		run("dpkg", "--root="+root, "--verify", "hostlet")
		if st := run("dpkg", "--root="+root, "-s", "hostlet"); !strings.Contains(st, "Status: install ok unpacked") {
			t.Errorf("dpkg -s after --unpack:\n%s", st)
		}
		if got, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/hostlet.postinst")); err != nil || string(got) != postinst {
			t.Errorf("installed postinst: %v\n%s", err, got)
		}
		run("sh", "-n", filepath.Join(root, "var/lib/dpkg/info/hostlet.postinst"))
		if got, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/hostlet.prerm")); err != nil || string(got) != fmt.Sprintf(prermTemplate, v.deb) {
			t.Errorf("installed prerm: %v\n%s", err, got)
		}
	} else {
		run("dpkg", "-x", deb, root)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "usr/bin/hostlet")); !bytes.Equal(got, binary) {
		t.Errorf("%s: /usr/bin/hostlet is not the release's binary", deb)
	}
	if cr, _ := os.ReadFile(filepath.Join(root, "usr/share/doc/hostlet/copyright")); !bytes.Contains(cr, []byte("github.com/containerd/containerd/v2 (NOTICE)")) {
		t.Errorf("%s: the copyright file lacks containerd's NOTICE", deb)
	}
}

// checkImage: the archive is an OCI layout whose one entry, named ref, is an
// index of a linux/amd64 and a linux/arm64 image; each has hostlet as its
// entrypoint (the release's binary), runs as nobody and was created at the
// commit's time; pushed to a registry it keeps its digest.
func checkImage(ctx context.Context, t *testing.T, archive, ref string, created time.Time, binaries map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	if err := untarFile(archive, dir); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations["io.containerd.image.name"] != ref ||
		tm.Manifests[0].Annotations[ocispec.AnnotationRefName] != ref[strings.LastIndex(ref, ":")+1:] {
		t.Fatalf("index.json: %+v, want one entry named %s", tm.Manifests, ref)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %+v", m.Digest, m.Platform)
		}
		arch := m.Platform.Architecture
		seen[arch] = true
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || !cf.Created.Time.Equal(created) || cf.Config.User != "65534:65534" ||
			strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/hostlet" {
			t.Errorf("%s config: arch %s created %v user %q entrypoint %q", arch, cf.Architecture, cf.Created, cf.Config.User, cf.Config.Entrypoint)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %d, %v", arch, len(layers), err)
		}
		got := layerFile(t, layers[0], imageBinary)
		if !bytes.Equal(got, binaries[arch]) {
			t.Errorf("%s: /%s is not the release's binary (%d bytes)", arch, imageBinary, len(got))
		}
	}
	if !seen["amd64"] || !seen["arm64"] || len(seen) != 2 {
		t.Errorf("image platforms %v, want amd64 and arm64", seen)
	}

	reg, err := images.StartRegistry("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	dst, err := name.ParseReference(reg.Addr()+"/hostlet:"+ref[strings.LastIndex(ref, ":")+1:], name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(dst, idx, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push to a registry: %v", err)
	}
	pulled, err := remote.Index(dst, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != tm.Manifests[0].Digest {
		t.Errorf("pushed index %s, the archive's is %s", got, tm.Manifests[0].Digest)
	}
}

func layerFile(t *testing.T, l v1.Layer, path string) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("layer has no %s", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("layer entry %s owned by %d:%d", hdr.Name, hdr.Uid, hdr.Gid)
		}
		if hdr.Name == path {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func untarFile(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		p := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		default:
			err = fmt.Errorf("unexpected entry %q", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

// checkChart: the packaged chart lints, has the release's version and
// appVersion, and its approver runs the release's image.
func checkChart(t *testing.T, helm, tgz, repo string, v versions) {
	t.Helper()
	offline := []string{"--set", "clusterInfo.server=https://10.0.0.1:6443", "--set", "clusterInfo.caCert=not-checked-here"}
	helmRun := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(helm, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := helmRun(append([]string{"lint", "--strict", tgz}, offline...)...); strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
		t.Errorf("helm lint:\n%s", out)
	}
	chart := helmRun("show", "chart", tgz)
	for _, want := range []string{"\nversion: " + v.chart + "\n", "\nappVersion: " + v.git + "\n"} {
		if !strings.Contains("\n"+chart, want) {
			t.Errorf("Chart.yaml lacks %q:\n%s", strings.TrimSpace(want), chart)
		}
	}
	rendered := helmRun(append([]string{"template", "r", tgz, "--set", "servingCertApprover.enabled=true"}, offline...)...)
	if want := `image: "` + repo + ":" + v.git + `"`; !strings.Contains(rendered, want) {
		t.Errorf("the approver does not run %s:\n%s", want, rendered)
	}
}
