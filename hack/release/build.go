package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/hostlet/hostlet/test/images"
)

// goEnv is the environment of the release's go commands for arch: static
// (hostlet has no cgo of its own; see the Makefile's release target), and
// nothing of the caller's GOFLAGS, GOEXPERIMENT or micro-architecture
// levels, which would change the bytes.
func goEnv(arch string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CGO_ENABLED", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT", "GOAMD64", "GOARM64":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOEXPERIMENT=",
		"GOAMD64=v1", "GOARM64=v8.0")
}

// buildHostlet builds the static, stripped hostlet of arch at dst, its
// version set as make build sets it. -trimpath and -buildvcs=false keep the
// checkout's path and git state out of the binary: the same commit and Go
// toolchain give the same bytes anywhere.
func buildHostlet(ctx context.Context, root, arch, version, dst string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-tags="+images.HostletTags, "-ldflags=-s -w -X main.version="+version,
		"-o", dst, "./cmd/hostlet")
	cmd.Dir = root
	cmd.Env = goEnv(arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build hostlet for linux/%s: %w\n%s", arch, err, out)
	}
	return nil
}

// module is one Go module linked into hostlet.
type module struct {
	path, version, dir string
}

// linkedModules lists the modules whose packages hostlet of arch links, from
// the module cache the build just used (no network).
func linkedModules(ctx context.Context, root, arch string) ([]module, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags="+images.HostletTags,
		"-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}\t{{.Dir}}{{end}}{{end}}",
		"./cmd/hostlet")
	cmd.Dir = root
	cmd.Env = goEnv(arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list hostlet's modules: %w\n%s", err, stderr.Bytes())
	}
	seen := map[string]bool{}
	var mods []module
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		mods = append(mods, module{path: f[0], version: f[1], dir: f[2]})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].path < mods[j].path })
	return mods, nil
}

// licenseFileRE names the files of a module's root that carry its license
// terms (LICENSE, LICENSE.md, COPYING, NOTICE, LICENSE-APACHE...).
var licenseFileRE = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([-._].*)?$`)

// copyright is the package's and the image's copyright file: hostlet's own
// license and, as hostlet is one static binary, the license and notice files
// of the Go standard library and of every module it links, each distinct
// text once with the modules it covers.
func copyright(ctx context.Context, root, arch string, v versions) ([]byte, error) {
	mods, err := linkedModules(ctx, root, arch)
	if err != nil {
		return nil, err
	}
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	mods = append([]module{{path: "Go standard library", dir: strings.TrimSpace(string(goroot))}}, mods...)

	var b bytes.Buffer
	fmt.Fprintf(&b, "hostlet %s\nSource: https://github.com/hostlet/hostlet\n\n", v.git)
	own, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	switch {
	case err == nil:
		fmt.Fprintf(&b, "hostlet's own code:\n\n%s\n", own)
	case os.IsNotExist(err):
		b.WriteString("hostlet's own code: the repository has no LICENSE file at this version.\n")
	default:
		return nil, err
	}
	b.WriteString("\n/usr/bin/hostlet is statically linked: it holds the Go standard library and the\n" +
		"Go modules below, each under its own terms; their license and notice files follow.\n\n")

	type text struct {
		data    []byte
		modules []string
	}
	texts := map[[32]byte]*text{}
	var order [][32]byte
	var missing []string
	for _, m := range mods {
		name := strings.TrimSpace(m.path + " " + m.version)
		fmt.Fprintf(&b, "  %s\n", name)
		entries, err := os.ReadDir(m.dir)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", name, err)
		}
		found := false
		for _, e := range entries {
			if e.IsDir() || !licenseFileRE.MatchString(e.Name()) {
				continue
			}
			data, err := os.ReadFile(filepath.Join(m.dir, e.Name()))
			if err != nil {
				return nil, err
			}
			found = true
			key := sha256.Sum256(bytes.TrimSpace(data))
			t := texts[key]
			if t == nil {
				t = &text{data: bytes.TrimSpace(data)}
				texts[key] = t
				order = append(order, key)
			}
			t.modules = append(t.modules, m.path+" ("+e.Name()+")")
		}
		if !found {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		// A module without its terms is not shipped silently.
		return nil, fmt.Errorf("no license file in the root of module(s) %s: add its terms to hack/release by hand", strings.Join(missing, ", "))
	}
	for _, key := range order {
		t := texts[key]
		fmt.Fprintf(&b, "\n%s\nFor: %s\n\n%s\n", strings.Repeat("-", 78), strings.Join(t.modules, ", "), t.data)
	}
	return b.Bytes(), nil
}
