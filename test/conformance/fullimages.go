package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hostlet/hostlet/test/harness"
)

// The images only -full needs: for the aggregator spec ([sig-api-machinery]
// Aggregator should be able to support the 1.17 Sample API Server) the
// sample-apiserver of the pinned release and the etcd it stores in; for
// kubectl's Update Demo specs kitten and nautilus (agnhost's test-webserver
// serving a picture and its data.json from /). The one-node selection does
// not build them (the cost of make conformance stays what it was).
const (
	kindSampleAPIServer imageKind = "sample-apiserver"
	kindEtcd            imageKind = "etcd"
	kindKitten          imageKind = "kitten"
	kindNautilus        imageKind = "nautilus"
)

var fullImageRE = regexp.MustCompile(`^registry\.k8s\.io/(?:e2e-test-images/(sample-apiserver|kitten|nautilus)|(etcd)):[^/]+$`)

// wantedFullImages maps -full's extra refs of the list to their kinds.
func wantedFullImages(list []string) map[string]imageKind {
	out := map[string]imageKind{}
	for _, ref := range list {
		if m := fullImageRE.FindStringSubmatch(strings.TrimSpace(ref)); m != nil {
			out[m[0]] = imageKind(m[1] + m[2])
		}
	}
	return out
}

// fullRecipe is the recipe of -full's kinds, ok false for another kind.
// Upstream's sample-apiserver image runs /sample-apiserver; the spec runs
// etcd as /usr/local/bin/etcd, where upstream's etcd image has it.
func fullRecipe(kind imageKind, in imageInputs) (imageRecipe, bool) {
	cfg := imageRecipe{config: defaultConfig()}
	switch kind {
	case kindSampleAPIServer:
		cfg.config.Entrypoint = []string{"/sample-apiserver"}
		cfg.layers = [][]layerEntry{baseLayer(in), {{name: "sample-apiserver", mode: 0o755, data: in.sampleAPIServer}}}
	case kindEtcd:
		cfg.layers = [][]layerEntry{baseLayer(in), {{name: "usr/local/bin/etcd", mode: 0o755, data: in.etcd}}}
	case kindKitten, kindNautilus:
		cfg.config.Entrypoint = []string{"/agnhost"}
		cfg.config.Cmd = []string{"test-webserver"}
		var files []layerEntry
		for _, f := range in.updateDemo[kind] {
			files = append(files, layerEntry{name: f.name, mode: 0o644, data: f.data})
		}
		cfg.layers = [][]layerEntry{baseLayer(in), agnhostLayer(in), files}
	default:
		return imageRecipe{}, false
	}
	return cfg, true
}

type namedFile struct {
	name string
	data []byte
}

// readFullInputs builds k8s.io/sample-apiserver at the version
// test/cluster/e2e pins (from its module, which the e2e module only
// replaces) and reads the cluster's etcd binary and the Update Demo's files
// into in.
func readFullInputs(ctx context.Context, root, scratch string, in *imageInputs) error {
	gomod, err := os.ReadFile(filepath.Join(root, "test", "cluster", "e2e", "go.mod"))
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`(?m)^replace k8s\.io/sample-apiserver => k8s\.io/sample-apiserver (v\S+)$`).FindSubmatch(gomod)
	if m == nil {
		return fmt.Errorf("test/cluster/e2e/go.mod: no k8s.io/sample-apiserver version")
	}
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/sample-apiserver@"+string(m[1]))
	dl.Dir = scratch // outside any module
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("go mod download k8s.io/sample-apiserver@%s: %w", m[1], err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download k8s.io/sample-apiserver: %q: %v", out, err)
	}
	bin := filepath.Join(scratch, "sample-apiserver")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Dir = mod.Dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build k8s.io/sample-apiserver: %w\n%s", err, b)
	}
	if in.sampleAPIServer, err = os.ReadFile(bin); err != nil {
		return err
	}
	// The pictures and data.json of upstream's kitten and nautilus images.
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	list.Dir = filepath.Join(root, "test", "cluster", "e2e")
	kdir, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list -m k8s.io/kubernetes (test/cluster/e2e): %w", err)
	}
	in.updateDemo = map[imageKind][]namedFile{}
	for _, k := range []imageKind{kindKitten, kindNautilus} {
		html := filepath.Join(strings.TrimSpace(string(kdir)), "test", "images", string(k), "html")
		for _, name := range []string{string(k) + ".jpg", "data.json"} {
			b, err := os.ReadFile(filepath.Join(html, name))
			if err != nil {
				return err
			}
			in.updateDemo[k] = append(in.updateDemo[k], namedFile{name, b})
		}
	}
	binDir, err := harness.BuildComponents(ctx, logf)
	if err != nil {
		return err
	}
	in.etcd, err = os.ReadFile(filepath.Join(binDir, "etcd"))
	return err
}
