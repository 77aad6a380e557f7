package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hostlet/hostlet/test/harness"
	testimages "github.com/hostlet/hostlet/test/images"
)

// pullCase is one case of the images scenario: pods of the big image
// started at once on nodes that have none of its layers (or, staggered,
// the first node's pods first and the others' once those run).
type pullCase struct {
	name          string
	nodes, pods   int
	running       int // pods that got Running in time
	allRunning    time.Duration
	start         dist
	served, image int64 // registry bytes served in the case; the image's layer bytes
}

// bigImages are the big image in the loopback registry, as plain gzip and
// as eStargz, and the registry's blob counts.
type bigImages struct {
	reg          *testimages.Registry
	gzip, stargz string // refs
	gzipLayers   []ggcr.Hash
	stargzLayers []ggcr.Hash
	gzipSize     int64
	stargzSize   int64
}

// served is what the registry served of layers so far, in bytes.
func (bi *bigImages) served(layers []ggcr.Hash) int64 {
	var n int64
	for _, l := range layers {
		n += bi.reg.Blob(l.String()).Bytes
	}
	return n
}

// imagesSetup starts the loopback registry, builds the big image both ways
// and pushes them, once for both nodes; the registry and the RBAC the
// mirror needs go at the run's end.
func (b *bench) imagesSetup(ctx context.Context) (*bigImages, error) {
	b.imgOnce.Do(func() { b.img, b.imgErr = b.setupBigImages(ctx) })
	return b.img, b.imgErr
}

func (b *bench) setupBigImages(ctx context.Context) (*bigImages, error) {
	size := int64(b.cfg.imageMB) << 20
	// The most a case holds at once: its nodes' content and unpacked
	// snapshots, beside the build's blobs (each image's, one at a time).
	need := int64(max(b.cfg.imageNodes, 1))*2*size + 2*size + 2<<30
	if free, err := freeBytes(b.cluster.Dir()); err != nil {
		return nil, err
	} else if free < need {
		return nil, fmt.Errorf("%.1f GB free under %s; the images scenario of a %d MB image needs %.1f GB (-image-mb)",
			float64(free)/1e9, b.cluster.Dir(), b.cfg.imageMB, float64(need)/1e9)
	}
	exe, err := os.ReadFile(b.imgs.pauseExe)
	if err != nil {
		return nil, err
	}
	reg, err := testimages.StartRegistry("127.0.0.1:0", nil)
	if err != nil {
		return nil, err
	}
	b.cl.add("stop the loopback registry", reg.Close)
	for _, dir := range append([]string{b.cluster.ContainerdHostsDir()}, b.hostsDirs...) {
		if err := harness.AllowInsecureRegistryIn(dir, reg.Addr()); err != nil {
			return nil, err
		}
	}
	bi := &bigImages{reg: reg}
	spec := bigImageSpec{total: size, perLayer: layerBytes, perFile: dataFile, idle: exe}
	work := filepath.Join(b.cluster.Dir(), "bench-bigimage")
	defer os.RemoveAll(work)
	for _, v := range []struct {
		stargz bool
		repo   string
		ref    *string
		layers *[]ggcr.Hash
		size   *int64
	}{{false, "big/gzip", &bi.gzip, &bi.gzipLayers, &bi.gzipSize}, {true, "big/estargz", &bi.stargz, &bi.stargzLayers, &bi.stargzSize}} {
		t0 := time.Now()
		dir := filepath.Join(work, filepath.Base(v.repo))
		img, err := buildBigImage(spec, dir, v.stargz)
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", v.repo, err)
		}
		if *v.ref, err = pushImage(ctx, reg.Addr(), fmt.Sprintf("%s:%dmb", v.repo, b.cfg.imageMB), img.img); err != nil {
			return nil, err
		}
		*v.layers, *v.size = img.layers, img.size
		// The registry holds the blobs now.
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		log.Infof("%s: %d layers, %.0f MB, built and pushed in %v", *v.ref, len(img.layers), float64(img.size)/1e6, time.Since(t0).Round(time.Second))
	}
	if err := b.mirrorRBAC(ctx); err != nil {
		return nil, err
	}
	return bi, nil
}

func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// mirrorRBAC lets nodes list and watch all Nodes (the peers), as the
// chart's rbac.registryMirror does.
func (b *bench) mirrorRBAC(ctx context.Context) error {
	const name = "bench:registry-mirror-peers"
	rbac := b.cs.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	b.cl.add("delete ClusterRole "+name, func() error {
		return rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	b.cl.add("delete ClusterRoleBinding "+name, func() error {
		return rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return nil
}

// pullTimeout bounds a case's wait for Running: a loaded machine unpacks
// some MB per second.
func (b *bench) pullTimeout() time.Duration {
	return max(5*time.Minute, time.Duration(b.cfg.imageMB)*2*time.Second)
}

// images runs the images scenario on t: on hostlet, fresh nodes (each
// with a containerd of its own and an empty content store) for a normal
// pull, a lazy pull, and -image-nodes nodes at once without and with the
// registry mirror, and with the mirror once more staggered (the first
// node's pods, then the others': what the mirror saves once a peer has the
// image); on the kubelet, its normal pull on its node, the anchor (the
// image removed after).
func (b *bench) images(ctx context.Context, t target, r *nodeResult) error {
	bi, err := b.imagesSetup(ctx)
	if err != nil {
		return err
	}
	if t.cri != nil {
		log.Infof("[%s] images: %d pods of %s", t.label, b.cfg.imagePods, bi.gzip)
		pc, err := b.pullCase(ctx, t, r, "images-kubelet", "normal pull", []string{t.node}, false, bi.gzip, func() int64 { return bi.served(bi.gzipLayers) })
		if err != nil {
			return err
		}
		pc.image = bi.gzipSize
		r.pulls = append(r.pulls, *pc)
		return removeImage(ctx, t.cri, bi.gzip)
	}
	n := b.cfg.imageNodes
	for i, c := range []struct {
		name                    string
		nodes                   int
		stargz, mirror, stagger bool
	}{
		{"normal pull", 1, false, false, false},
		{"lazy pull (eStargz, --image-snapshotter=stargz)", 1, true, false, false},
		{fmt.Sprintf("%d nodes at once, normal pull", n), n, false, false, false},
		{fmt.Sprintf("%d nodes at once, --registry-mirror", n), n, false, true, false},
		{fmt.Sprintf("%d nodes, --registry-mirror, the first node's pods first", n), n, false, true, true},
	} {
		if c.stagger && n < 2 {
			continue
		}
		ref, layers, size := bi.gzip, bi.gzipLayers, bi.gzipSize
		if c.stargz {
			ref, layers, size = bi.stargz, bi.stargzLayers, bi.stargzSize
		}
		log.Infof("[%s] images: %s: %d pods of %s on %d fresh nodes", t.label, c.name, b.cfg.imagePods, ref, c.nodes)
		nodes, stop, err := b.freshNodes(ctx, fmt.Sprintf("bench-img%d", i), c.nodes, c.stargz, c.mirror)
		if err == nil {
			var pc *pullCase
			pc, err = b.pullCase(ctx, t, r, fmt.Sprintf("images%d", i), c.name, nodes, c.stagger, ref, func() int64 { return bi.served(layers) })
			if err == nil {
				pc.image = size
				r.pulls = append(r.pulls, *pc)
			}
		}
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// pullCase creates -image-pods pods of ref spread over nodes at once and
// times them to Running; then deletes them. Pods not Running or not gone
// in time are counted (the pods table), not fatal.
func (b *bench) pullCase(ctx context.Context, t target, r *nodeResult, scenario, name string, nodes []string, stagger bool, ref string, served func() int64) (*pullCase, error) {
	var pods []*v1.Pod
	waves := [][]*v1.Pod{nil}
	if stagger {
		waves = append(waves, nil)
	}
	for i := range b.cfg.imagePods {
		node := i % len(nodes)
		p := basePod(nodes[node], t.ns, scenario, i, v1.Container{
			Name: "main", Image: ref, ImagePullPolicy: v1.PullIfNotPresent,
		})
		pods, waves[min(node, len(waves)-1)] = append(pods, p), append(waves[min(node, len(waves)-1)], p)
	}
	before := served()
	created, running := map[string]time.Time{}, map[string]time.Time{}
	var tr *tracker
	for _, wave := range waves {
		wtr, c, run, err := b.launch(ctx, t, scenario, wave, "running", map[string]cond{"running": harness.PodRunning}, b.pullTimeout())
		if err != nil {
			return nil, err
		}
		// The last wave's tracker sees all the case's pods (one label).
		if tr != nil {
			tr.stop()
		}
		tr = wtr
		maps.Copy(created, c)
		maps.Copy(running, run)
	}
	defer tr.stop()
	pc := &pullCase{name: name, nodes: len(nodes), pods: len(pods), running: len(running),
		allRunning: span(created, running), start: latencies(created, running), served: served() - before}
	log.Infof("[%s] %s: %d of %d pods Running after %v; the registry served %.0f MB", t.label, name, len(running), len(pods),
		pc.allRunning.Round(time.Millisecond), float64(pc.served)/1e6)
	_, goneAt, err := b.remove(ctx, tr, pods, 3*time.Minute)
	r.count(fmt.Sprintf("images: %s", name), pods, running, goneAt)
	return pc, err
}

// freshNodes starts n hostlet nodes, each with a containerd of its own
// (CRI off, as hostlet's nodes run it; with a stargz snapshotter for lazy
// pulls), and returns their names and what stops them and removes their
// state (the images with it).
func (b *bench) freshNodes(ctx context.Context, prefix string, n int, stargz, mirror bool) ([]string, func(), error) {
	var names []string
	var undo cleanups
	stop := func() { undo.run() }
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		snapshotters := map[string]string{}
		args := []string{"--v", "2"}
		if stargz {
			sn, err := b.cluster.AddStargzSnapshotter(ctx, name, b.hostletBin)
			if err != nil {
				return nil, stop, err
			}
			dir := filepath.Dir(sn.Socket())
			undo.add("remove "+dir, func() error { return removeUnmounted(dir) })
			undo.add("stop stargz snapshotter "+name, func() error { sn.Stop(); return nil })
			snapshotters["stargz"] = sn.Socket()
			args = append(args, "--image-snapshotter", "stargz", "--stargz-credentials-socket", sn.CredentialsSocket())
		}
		d, err := b.cluster.AddContainerdWithSnapshotters(ctx, name, snapshotters)
		if err != nil {
			return nil, stop, err
		}
		undo.add("remove "+d.Dir(), func() error { return removeUnmounted(d.Dir()) })
		undo.add("stop containerd "+name, func() error { d.Stop(); return nil })
		if mirror {
			args = append(args, "--registry-mirror")
		}
		args = append(args, "--container-runtime-endpoint", "unix://"+d.Socket())
		h, err := b.cluster.StartHostlet(ctx, harness.HostletOptions{Binary: b.hostletBin, NodeName: name, ExtraArgs: args})
		if h != nil {
			undo.add("delete node "+name, func() error {
				err := b.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
			undo.add("stop hostlet "+name, func() error { h.Stop(); return nil })
		}
		if err != nil {
			return nil, stop, fmt.Errorf("node %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, stop, nil
}

// removeUnmounted removes dir unless something is still mounted below it
// (removing would reach into the mount): then it says so and leaves it to
// the harness's sweep.
func removeUnmounted(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return fmt.Errorf("%s still mounted, left in place", f[4])
		}
	}
	return os.RemoveAll(dir)
}

// removeImage deletes every image record of ref's manifest from the CRI
// containerd (the CRI plugin keeps the name, the repo digest and the ID),
// each synchronously, so its content and snapshots are collected.
func removeImage(ctx context.Context, cri *criRuntime, ref string) error {
	ctx = namespaces.WithNamespace(ctx, criNamespace)
	is := cri.client.ImageService()
	img, err := is.Get(ctx, ref)
	if err != nil {
		return fmt.Errorf("image %s on the kubelet's containerd: %w", ref, err)
	}
	all, err := is.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range all {
		if o.Target.Digest == img.Target.Digest {
			if err := is.Delete(ctx, o.Name, images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
