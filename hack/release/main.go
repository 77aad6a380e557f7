// Command release builds hostlet's release artifacts: `make release`.
//
// It lives in hack/, where Kubernetes projects keep their own build and
// release tooling: cmd/ holds hostlet, the one command users run, and test/
// what checks it; this is neither.
//
// From one commit it writes, into <out>/<version>/:
//
//	hostlet-<version>-linux-<arch>      static, stripped hostlet (amd64, arm64)
//	hostlet_<deb version>_<arch>.deb    /usr/bin/hostlet, what the host needs
//	hostlet-image-<version>.oci.tar     the multi-platform image, an OCI layout
//	hostlet-<chart version>.tgz         the chart, defaulting to that image
//	SHA256SUMS                          of all of the above
//
// Every artifact is reproducible: the same commit, Go toolchain and Helm give
// the same bytes (SOURCE_DATE_EPOCH is the commit's time; see the test).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// config is one release build's inputs.
type config struct {
	root       string // the checkout
	out        string // the release goes to out/<version>
	version    string // hack/release/version.sh's
	epoch      int64  // SOURCE_DATE_EPOCH: every mtime, the image's created
	imageRepo  string // the image's repository, without tag
	helm       string // the helm binary
	arches     []string
	maintainer string // the package's Maintainer field
	log        io.Writer
}

func main() {
	var c config
	var arches string
	flag.StringVar(&c.root, "root", ".", "the hostlet checkout")
	flag.StringVar(&c.out, "out", "dist", "output directory: the release goes to <out>/<version>/")
	flag.StringVar(&c.version, "version", "", "the release version (make: hack/release/version.sh)")
	flag.Int64Var(&c.epoch, "source-date-epoch", 0, "SOURCE_DATE_EPOCH, the time of every file (make: the commit's)")
	flag.StringVar(&c.imageRepo, "image-repo", "ghcr.io/hostlet/hostlet", "the image's repository; the chart defaults to <repo>:<version>")
	flag.StringVar(&c.helm, "helm", "helm", "the helm binary")
	flag.StringVar(&arches, "arch", "amd64,arm64", "architectures, comma-separated")
	flag.StringVar(&c.maintainer, "maintainer", "hostlet maintainers <maintainers@hostlet.invalid>", "the package's Maintainer")
	flag.Parse()
	c.arches = strings.Split(arches, ",")
	c.log = os.Stderr
	ctx := context.Background()
	start := time.Now()
	dir, err := release(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s (in %v):\n%s", dir, time.Since(start).Round(time.Second), sums)
}

// release builds every artifact into a temporary directory beside the
// result and renames it into place: a failed build leaves no partial
// release behind. It returns the release's directory.
func release(ctx context.Context, c config) (string, error) {
	v, err := parseVersion(c.version)
	if err != nil {
		return "", err
	}
	if c.epoch <= 0 {
		return "", errors.New("no SOURCE_DATE_EPOCH (make: the commit's time, git log -1 --format=%ct)")
	}
	epoch := time.Unix(c.epoch, 0).UTC()
	ref, err := name.NewTag(c.imageRepo+":"+v.git, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image repository %q: %w", c.imageRepo, err)
	}
	if c.root, err = filepath.Abs(c.root); err != nil {
		return "", err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(c.out, ".partial-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	work, err := os.MkdirTemp("", "hostlet-release-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)

	step := func(format string, args ...any) func() {
		t0 := time.Now()
		fmt.Fprintf(c.log, "release: "+format+" ...\n", args...)
		return func() { fmt.Fprintf(c.log, "release:   %v\n", time.Since(t0).Round(100*time.Millisecond)) }
	}
	var images []imageArch
	for _, arch := range c.arches {
		done := step("hostlet %s for linux/%s", v.git, arch)
		bin := filepath.Join(tmp, fmt.Sprintf("hostlet-%s-linux-%s", v.git, arch))
		if err := buildHostlet(ctx, c.root, arch, v.git, bin); err != nil {
			return "", err
		}
		binary, err := os.ReadFile(bin)
		if err != nil {
			return "", err
		}
		if err := os.Chmod(bin, 0o755); err != nil {
			return "", err
		}
		cr, err := copyright(ctx, c.root, arch, v)
		if err != nil {
			return "", err
		}
		done()
		done = step("hostlet_%s_%s.deb", v.deb, arch)
		if _, err := buildDeb(ctx, work, tmp, arch, v, epoch, c.maintainer, binary, cr); err != nil {
			return "", err
		}
		done()
		images = append(images, imageArch{arch: arch, binary: binary, copyright: cr})
	}
	done := step("image %s", ref)
	if err := buildImage(work, filepath.Join(tmp, "hostlet-image-"+v.git+".oci.tar"), ref.String(), ref.TagStr(), v, epoch, images); err != nil {
		return "", err
	}
	done()
	done = step("chart %s", v.chart)
	if _, err := packageChart(ctx, c.helm, c.root, work, tmp, c.imageRepo, v, epoch); err != nil {
		return "", err
	}
	done()
	if err := writeSums(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	dir := filepath.Join(c.out, v.git)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// writeSums writes SHA256SUMS of every file in dir, in sha256sum's format
// (sha256sum -c SHA256SUMS checks them).
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}
