package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// KubeProxyRef is the kube-proxy image BuildKubeProxy makes.
const KubeProxyRef = "hostlet.local/kube-proxy:v1"

// iptablesDebs are Debian's packages that make a working iptables
// (nf_tables and legacy backends) with the C library they link against.
var iptablesDebs = []string{"iptables", "libip4tc2", "libip6tc2", "libxtables12", "libmnl0",
	"libnetfilter-conntrack3", "libnfnetlink0", "libnftnl11", "libc6"}

// iptablesTools are what kube-proxy runs, each a link to the nf_tables
// multi-call binary, as update-alternatives makes them on Debian (the
// upstream image's iptables-wrapper picks the same on such hosts).
var iptablesTools = []string{"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore"}

// BuildKubeProxy builds the kube-proxy image into outDir: the busybox base,
// Debian's iptables extracted from its packages (downloaded once with
// apt-get into outDir/debs) and the kube-proxy binary (test/cluster/build.sh
// kube-proxy) at /usr/local/bin. Reused while its inputs are unchanged.
func BuildKubeProxy(ctx context.Context, outDir, kubeProxy string) (Image, error) {
	return iptablesImage(ctx, outDir, KubeProxyRef, map[string]string{"usr/local/bin/kube-proxy": kubeProxy}, ocispec.ImageConfig{
		Env:        []string{"PATH=" + defaultPath},
		Entrypoint: []string{"/usr/local/bin/kube-proxy"},
	})
}

// cachedImage returns outDir's archive of ref for these inputs, building it
// with spec on a miss (and removing archives of older inputs).
func cachedImage(outDir, ref string, inputs []string, spec func() (imageSpec, error)) (Image, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", formatVersion)
	for _, in := range inputs {
		fmt.Fprintf(h, "%s\n", in)
	}
	key := hex.EncodeToString(h.Sum(nil))
	archive := filepath.Join(outDir, fileStem(ref)+"-"+key[:keyLen]+".tar")
	img := Image{Ref: ref, Archive: archive}
	if _, err := os.Stat(archive); err == nil {
		return img, nil
	}
	sp, err := spec()
	if err != nil {
		return Image{}, err
	}
	if err := writeArchive(archive, sp); err != nil {
		return Image{}, fmt.Errorf("build %s: %w", ref, err)
	}
	removeStale(outDir, ref, archive)
	return img, nil
}

// downloadDebs fetches the packages' .deb files into dir unless already
// there, and returns them sorted.
func downloadDebs(ctx context.Context, dir string, pkgs []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range pkgs {
		if m, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb")); len(m) == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download"}, missing...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %w\n%s", strings.Join(missing, " "), err, out)
		}
	}
	var debs []string
	for _, p := range pkgs {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb"))
		if len(m) == 0 {
			return nil, fmt.Errorf("apt-get download left no %s_*.deb in %s", p, dir)
		}
		debs = append(debs, m[len(m)-1])
	}
	sort.Strings(debs)
	return debs, nil
}

// debLayer unpacks the packages (dpkg-deb -x, no maintainer scripts) into
// one layer, without their documentation, plus the iptables links.
func debLayer(ctx context.Context, debs []string) (layer, error) {
	root, err := os.MkdirTemp("", "hostlet-debs-")
	if err != nil {
		return layer{}, err
	}
	defer os.RemoveAll(root)
	for _, d := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, root).CombinedOutput(); err != nil {
			return layer{}, fmt.Errorf("dpkg-deb -x %s: %w\n%s", d, err, out)
		}
	}
	var entries []entry
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		name, _ := filepath.Rel(root, p)
		if strings.HasPrefix(name, "usr/share/doc") || strings.HasPrefix(name, "usr/share/man") ||
			strings.HasPrefix(name, "usr/share/lintian") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			entries = append(entries, dir(name, int64(info.Mode().Perm())))
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			entries = append(entries, symlink(name, target))
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entries = append(entries, file(name, int64(info.Mode().Perm()), b))
		}
		return nil
	})
	if err != nil {
		return layer{}, err
	}
	for _, t := range iptablesTools {
		entries = append(entries, symlink("usr/sbin/"+t, "xtables-nft-multi"))
	}
	return buildLayer(entries)
}
