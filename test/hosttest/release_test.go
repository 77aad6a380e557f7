package hosttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// release is one build of hack/release for linux/amd64: what a user
// downloads for a Debian host and a cluster.
type release struct {
	version string // git's (hack/release/version.sh), the image's tag
	deb     string // hostlet_<deb version>_amd64.deb
	chart   string // hostlet-<chart version>.tgz, defaulting to the image
	image   string // hostlet-image-<version>.oci.tar, ghcr.io/hostlet/hostlet:<version>
}

// imageRepo is the repository the test's releases name their image in
// (make release's default): the VM imports the archive under that name,
// nothing is pulled.
const imageRepo = "ghcr.io/hostlet/hostlet"

// buildRelease runs the hack/release of the checkout at root, as make
// release does (its version.sh, its commit's time), for linux/amd64 only
// (-arch amd64: one go build; the image and chart steps take seconds), into
// out/<version>. The checkout's own tool: an older commit's release is
// built by that commit's hack/release.
func buildRelease(ctx context.Context, t *testing.T, root, helm, out string) release {
	t.Helper()
	version := strings.TrimSpace(runIn(ctx, t, root, "hack/release/version.sh"))
	epoch := strings.TrimSpace(runIn(ctx, t, root, "git", "log", "-1", "--format=%ct"))
	t0 := time.Now()
	runIn(ctx, t, root, "go", "run", "./hack/release", "-root", ".", "-out", out, "-version", version,
		"-source-date-epoch", epoch, "-arch", "amd64", "-image-repo", imageRepo, "-helm", helm)
	t.Logf("release %s built by its hack/release in %v", version, time.Since(t0).Round(time.Second))
	return readRelease(t, filepath.Join(out, version))
}

// readRelease finds a release's amd64 artifacts in its directory.
func readRelease(t *testing.T, dir string) release {
	t.Helper()
	r := release{version: filepath.Base(dir)}
	for _, f := range []struct {
		dst     *string
		pattern string
	}{{&r.deb, "hostlet_*_amd64.deb"}, {&r.chart, "hostlet-*.tgz"}, {&r.image, "hostlet-image-*.oci.tar"}} {
		m, _ := filepath.Glob(filepath.Join(dir, f.pattern))
		if len(m) != 1 {
			t.Fatalf("release %s: want one %s, found %v", dir, f.pattern, m)
		}
		*f.dst = m[0]
	}
	return r
}

// previousRelease is the release the host test upgrades from: that of
// $HOSTTEST_UPGRADE_FROM (a commit, tag or branch; "none": no upgrade), by
// default the newest v* tag before HEAD, and while the repository has none
// HEAD~30 (first parent), or the first commit with hack/release if HEAD~30
// predates it. Built in a temporary git worktree with that commit's own
// hack/release and cached by commit in <cache>/release/<commit>: a commit's
// release is the same bytes every time.
func previousRelease(ctx context.Context, t *testing.T, root, cache, helm string) (release, bool) {
	t.Helper()
	from := os.Getenv("HOSTTEST_UPGRADE_FROM")
	if from == "none" {
		return release{}, false
	}
	if from == "" {
		from = defaultPrevious(ctx, root)
	}
	commit := strings.TrimSpace(runIn(ctx, t, root, "git", "rev-parse", "--verify", from+"^{commit}"))
	out := filepath.Join(cache, "release", commit)
	if r, ok := cachedRelease(t, out); ok {
		t.Logf("previous release: %s (%s, cached)", r.version, from)
		return r, true
	}
	wt := filepath.Join(t.TempDir(), "previous")
	runIn(ctx, t, root, "git", "worktree", "add", "--detach", wt, commit)
	defer func() {
		// Not runIn: a failed removal must not hide the build's failure.
		if b, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", wt).CombinedOutput(); err != nil {
			t.Logf("git worktree remove %s: %v: %s", wt, err, b)
		}
	}()
	r := buildRelease(ctx, t, wt, helm, out)
	t.Logf("previous release: %s (%s)", r.version, from)
	return r, true
}

// currentRelease is the checkout's release: built into the test's temp dir
// from a changed work tree (-dirty), else cached by commit as the previous
// release is (a rerun of the same commit builds nothing).
func currentRelease(ctx context.Context, t *testing.T, root, cache, helm string) release {
	t.Helper()
	version := strings.TrimSpace(runIn(ctx, t, root, "hack/release/version.sh"))
	if strings.HasSuffix(version, "-dirty") {
		return buildRelease(ctx, t, root, helm, t.TempDir())
	}
	out := filepath.Join(cache, "release", strings.TrimSpace(runIn(ctx, t, root, "git", "rev-parse", "HEAD")))
	if r, ok := cachedRelease(t, out); ok && r.version == version {
		t.Logf("release %s cached", r.version)
		return r
	}
	return buildRelease(ctx, t, root, helm, out)
}

// cachedRelease is the one release in out, if any; out is emptied
// otherwise, for the build (hack/release renames a complete release into
// place, so one with its SHA256SUMS is whole).
func cachedRelease(t *testing.T, out string) (release, bool) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(out, "*", "SHA256SUMS")); len(m) == 1 {
		return readRelease(t, filepath.Dir(m[0])), true
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	return release{}, false
}

// defaultPrevious: the newest v* tag before HEAD, else HEAD~30 if it has
// hack/release, else the first commit (on the first-parent line) that has it.
func defaultPrevious(ctx context.Context, root string) string {
	git := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(b)), err
	}
	if tag, err := git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD^"); err == nil && tag != "" {
		return tag
	}
	if _, err := git("cat-file", "-e", "HEAD~30:hack/release/deb.go"); err == nil {
		return "HEAD~30"
	}
	if log, err := git("log", "--first-parent", "--format=%H", "--", "hack/release/deb.go"); err == nil && log != "" {
		lines := strings.Split(log, "\n")
		return lines[len(lines)-1]
	}
	return "HEAD"
}

// runIn runs a command in dir and returns its stdout; it must work.
func runIn(ctx context.Context, t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s%s", name, strings.Join(args, " "), dir, err, out, stderr.String())
	}
	return string(out)
}

// debName is the .deb's file name (the payload keeps it: apt-get install
// wants a path ending in .deb).
func debName(r release) string { return filepath.Base(r.deb) }

func (r release) String() string { return fmt.Sprintf("%s (%s)", r.version, debName(r)) }
