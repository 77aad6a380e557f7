package images

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

const (
	// busyboxPath is where Debian's busybox-static package puts the binary.
	busyboxPath = "/usr/bin/busybox"
	modulePath  = "github.com/hostlet/hostlet"
	testappPkg  = "./test/images/testapp"
)

// HostletTags are the build tags of every hostlet binary (make build, the
// e2e and bench builds, the approver image; the Makefile reads this line).
// grpcnotrace drops grpc's golang.org/x/net/trace: its html/template calls
// reflect.Value.Method, and one reachable call makes the linker keep every
// exported method of every reachable type, megabytes of .text that stay
// resident in each hostlet process.
const HostletTags = "grpcnotrace"

// busyboxApplets lists the applet paths (relative, e.g. "bin/sh") the
// binary at path provides.
func busyboxApplets(ctx context.Context, path string) ([]string, error) {
	out, err := exec.CommandContext(ctx, path, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", path, err)
	}
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if a := strings.Trim(sc.Text(), "/ "); a != "" && a != "bin/busybox" {
			applets = append(applets, a)
		}
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s lists no applets", path)
	}
	return applets, nil
}

// readBusybox reads Debian's static busybox with its sh passing on every
// environment variable, as upstream's does (KeepBadEnvNames).
func readBusybox() ([]byte, error) {
	b, err := os.ReadFile(busyboxPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing: apt-get install -y busybox-static", busyboxPath)
	}
	if err != nil {
		return nil, err
	}
	return KeepBadEnvNames(b)
}

// moduleRoot finds the hostlet checkout: from this source file when the
// build kept its path, else from the working directory.
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for ; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
				bytes.Contains(b, []byte("module "+modulePath+"\n")) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("module %s not found above %q", modulePath, starts)
}

// buildTestapp compiles the testapp as a static, reproducible binary
// (-trimpath, no VCS stamp) and returns its bytes.
func buildTestapp(ctx context.Context) ([]byte, error) {
	return buildStatic(ctx, testappPkg, "")
}

// buildStatic compiles the module's package pkg (e.g. "./cmd/hostlet") as a
// static, reproducible binary (no cgo, -trimpath, no VCS stamp) with the
// build tags tags and returns its bytes.
func buildStatic(ctx context.Context, pkg, tags string) ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "hostlet-static-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, goBinary(), "build", "-trimpath", "-buildvcs=false", "-tags="+tags, "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return os.ReadFile(bin)
}

// goBinary is the go command: from PATH, else from the toolchain this
// program was built with (test harnesses often run with a bare PATH).
func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
