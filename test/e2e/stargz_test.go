package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bigFileSize is the incompressible file the test images carry besides
// busybox: a lazy pull that runs `sleep` never reads it.
const bigFileSize = 24 << 20

// Lazy pulls (--image-snapshotter=stargz) on a node whose containerd has
// `hostlet stargz-snapshotter` as its proxy snapshotter "stargz": an
// eStargz image from a registry wanting auth (the pod's pull secret) runs
// with its big layer fetched only in ranges (the registry counts what it
// served; the snapshotter's background fetch is off so the count stays
// what running the container needed), and a plain gzip image of the same
// files falls back to a whole pull; both with the kubelet's events.
func TestStargzLazyPull(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	auth := &images.BasicAuth{User: "puller", Password: "pw"}
	reg := privateRegistry(t, auth)
	pullSecret(t, ns, reg.Addr(), auth.User, auth.Password)

	node := "stargz-node"
	sn, _, h := stargzNode(t, "lazy", node)

	lazyRef, lazyBig := pushBigImage(t, reg, auth, "lazy/app:v1", true)
	wholeRef, wholeBig := pushBigImage(t, reg, auth, "whole/app:v1", false)
	// Only ever an image volume: no container's image shares its layers.
	volRef, volBig := pushBigImageSeeded(t, reg, auth, "vol/app:v1", true, 4)
	volPod := func(name string) {
		t.Helper()
		pod := imagePod(ns, name, lazyRef, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		pod.Spec.Volumes = []v1.Volume{{Name: "img", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: volRef, PullPolicy: v1.PullIfNotPresent}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "img", MountPath: "/vol"}}
		cluster.CreatePod(t, pod)
		waitReady(t, ns, name)
	}

	run := func(t *testing.T, podName, ref string) {
		pod := imagePod(ns, podName, ref, v1.PullAlways)
		pod.Spec.NodeName = node
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		if want := fmt.Sprintf("Pulling image %q", ref); waitEvent(t, ns, pod.Name, "Pulling") != want {
			t.Errorf("no event %q", want)
		}
		msg := waitEvent(t, ns, pod.Name, "Pulled")
		if !strings.HasPrefix(msg, fmt.Sprintf("Successfully pulled image %q in ", ref)) {
			t.Errorf("Pulled event %q", msg)
		}
		t.Logf("Pulled: %s", msg)
	}
	t.Run("eStargz lazily", func(t *testing.T) {
		run(t, "lazy", lazyRef)
		got := reg.Blob(lazyBig.Digest.String())
		t.Logf("big layer: %d of %d bytes served, in %d requests %q", got.Bytes, lazyBig.Size, len(got.Requests), got.Requests)
		if got.Bytes == 0 || got.Bytes >= lazyBig.Size/2 {
			t.Errorf("served %d bytes of the %d-byte layer; want only ranges of it", got.Bytes, lazyBig.Size)
		}
		for _, r := range got.Requests {
			if r == "" {
				t.Errorf("the layer was asked for whole (requests %q)", got.Requests)
				break
			}
		}
		// A file read in the container is fetched then, in its chunks.
		if out := strings.TrimSpace(execIn(t, ns, "lazy", "c", "sh", "-c", "head -c 1000000 /big.bin | wc -c")); out != "1000000" {
			t.Errorf("read %q bytes of /big.bin, want 1000000", out)
		}
		after := reg.Blob(lazyBig.Digest.String())
		t.Logf("after reading 1 MB of /big.bin: %d of %d bytes served, in %d requests", after.Bytes, lazyBig.Size, len(after.Requests))
		if after.Bytes < got.Bytes+1000000 || after.Bytes >= lazyBig.Size/2 {
			t.Errorf("reading 1 MB: %d bytes served (before %d); want its chunks only", after.Bytes, got.Bytes)
		}
		// The node reports it as any pulled image.
		if _, err := cluster.WaitForNode(ctx, node, time.Minute, func(n *v1.Node) (bool, error) {
			for _, img := range n.Status.Images {
				if slices.Contains(img.Names, lazyRef) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Errorf("%s not in the node's status.images: %v", lazyRef, err)
		}
	})
	// The FUSE mounts are the snapshotter process's: a restarted hostlet
	// finds the container running and its files still readable.
	t.Run("survives a hostlet restart", func(t *testing.T) {
		before := reg.Blob(lazyBig.Digest.String())
		if err := h.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if out := strings.TrimSpace(execIn(t, ns, "lazy", "c", "sh", "-c", "tail -c 1000000 /big.bin | wc -c")); out != "1000000" {
			t.Errorf("read %q bytes of /big.bin's end, want 1000000", out)
		}
		after := reg.Blob(lazyBig.Digest.String())
		t.Logf("after reading its last 1 MB: %d of %d bytes served, in %d requests", after.Bytes, lazyBig.Size, len(after.Requests))
		if after.Bytes <= before.Bytes {
			t.Errorf("nothing fetched for the file's end (%d bytes served before, %d after)", before.Bytes, after.Bytes)
		}
		p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, "lazy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 || cs[0].State.Running == nil {
			t.Errorf("after the restart: container statuses %+v", cs)
		}
	})
	// The snapshotter keeps credentials in memory only, and so does
	// hostlet. Restarted, the snapshotter gets those of the images
	// hostlet's containers use from hostlet again before it remounts its
	// snapshots; hostlet, itself restarted above with no pull since, has
	// them from the adopted pod's pull secret. A new container of the
	// private image (present: no pull hands them over) runs, and reads
	// files not fetched yet. So does a new pod's image volume of a private
	// image only another pod's image volume uses (found by its lease in
	// containerd: the snapshotter lists nothing before the handover).
	t.Run("a restarted snapshotter gets the credentials again", func(t *testing.T) {
		volPod("volkeep")
		if err := sn.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		pod := imagePod(ns, "again", lazyRef, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		cluster.CreatePod(t, pod)
		if _, err := cluster.WaitForPod(ctx, ns, pod.Name, 2*time.Minute, harness.PodReady); err != nil {
			t.Fatalf("a new container of the image after the snapshotter's restart: %v (snapshotter log %s)", err, sn.LogPath())
		}
		before := reg.Blob(lazyBig.Digest.String())
		if out := strings.TrimSpace(execIn(t, ns, pod.Name, "c", "sh", "-c", "dd if=/big.bin bs=1048576 skip=10 count=1 2>/dev/null | wc -c")); out != "1048576" {
			t.Errorf("read %q bytes of /big.bin's middle, want 1048576", out)
		}
		after := reg.Blob(lazyBig.Digest.String())
		t.Logf("after reading 1 MiB of its middle: %d bytes served (before %d)", after.Bytes, before.Bytes)
		if after.Bytes <= before.Bytes {
			t.Errorf("nothing fetched for the file's middle (%d bytes served before, %d after)", before.Bytes, after.Bytes)
		}
		volPod("volagain")
		before = reg.Blob(volBig.Digest.String())
		if out := strings.TrimSpace(execIn(t, ns, "volagain", "c", "sh", "-c", "dd if=/vol/big.bin bs=1048576 skip=5 count=1 2>/dev/null | wc -c")); out != "1048576" {
			t.Errorf("read %q bytes of the image volume's /big.bin, want 1048576 (snapshotter log %s)", out, sn.LogPath())
		}
		after = reg.Blob(volBig.Digest.String())
		t.Logf("image volume: after reading 1 MiB of its middle: %d bytes served (before %d)", after.Bytes, before.Bytes)
		if after.Bytes <= before.Bytes {
			t.Errorf("nothing fetched for the image volume's file (%d bytes served before, %d after)", before.Bytes, after.Bytes)
		}
	})
	// An image volume of a lazily pulled image is a view in the stargz
	// snapshotter (overlayfs has none of its layers), released at deletion.
	t.Run("image volume", func(t *testing.T) {
		pod := imagePod(ns, "vol", lazyRef, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		pod.Spec.Volumes = []v1.Volume{{Name: "img", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: lazyRef, PullPolicy: v1.PullIfNotPresent}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "img", MountPath: "/vol"}}
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		if out := strings.TrimSpace(execIn(t, ns, pod.Name, "c", "sh", "-c", "test -x /vol/bin/busybox && head -c 10 /vol/big.bin | wc -c")); out != "10" {
			t.Errorf("image volume: %q, want busybox and 10 bytes of big.bin", out)
		}
		deletePod(t, ns, pod.Name)
		waitGone(t, ns, pod.Name)
	})
	t.Run("plain gzip falls back", func(t *testing.T) {
		run(t, "whole", wholeRef)
		got := reg.Blob(wholeBig.Digest.String())
		t.Logf("big layer: %d of %d bytes served, in %d requests", got.Bytes, wholeBig.Size, len(got.Requests))
		if got.Bytes < wholeBig.Size {
			t.Errorf("served %d bytes of the %d-byte layer; want it whole", got.Bytes, wholeBig.Size)
		}
	})
}

// stargzNode is a node whose containerd (named tag) has `hostlet
// stargz-snapshotter` as its proxy snapshotter "stargz" (without
// background fetch, so what a registry serves is what was read), and
// hostlet pulling lazily through it, with args added; all stopped when the
// test ends.
func stargzNode(t *testing.T, tag, node string, args ...string) (*harness.StargzSnapshotter, *harness.Containerd, *harness.Hostlet) {
	t.Helper()
	ctx := ctxT(t)
	sn, err := cluster.AddStargzSnapshotter(ctx, tag, hostletBinary(t), "--no-background-fetch")
	if err != nil {
		t.Fatal(err)
	}
	d, err := cluster.AddContainerdWithSnapshotters(ctx, tag, map[string]string{"stargz": sn.Socket()})
	if err != nil {
		sn.Stop()
		t.Fatal(err)
	}
	// containerd first: its containers are on the snapshotter's mounts.
	t.Cleanup(func() { d.Stop(); sn.Stop() })
	h := extraNode(t, harness.HostletOptions{NodeName: node, ExtraArgs: append([]string{
		"--container-runtime-endpoint", "unix://" + d.Socket(),
		"--image-snapshotter", "stargz", "--stargz-credentials-socket", sn.CredentialsSocket()}, args...)})
	return sn, d, h
}

// pushBigImage pushes busybox's files plus a big random file as repoTag,
// its two layers eStargz (the estargz package through go-containerregistry)
// or plain gzip, and returns its ref and the big layer's descriptor.
func pushBigImage(t *testing.T, reg *images.Registry, auth *images.BasicAuth, repoTag string, estargz bool) (string, ggcr.Descriptor) {
	t.Helper()
	return pushBigImageSeeded(t, reg, auth, repoTag, estargz, 1)
}

// pushBigImageSeeded is pushBigImage with the big file made from seed: an
// image whose big layer no other image shares (nor its snapshots).
func pushBigImageSeeded(t *testing.T, reg *images.Registry, auth *images.BasicAuth, repoTag string, estargz bool, seed int64) (string, ggcr.Descriptor) {
	t.Helper()
	ctx := ctxT(t)
	basic := remote.WithAuth(&authn.Basic{Username: auth.User, Password: auth.Password})
	baseRef, err := reg.Push(ctx, localImage(t, images.BusyboxRef), "base/busybox:"+strings.NewReplacer("/", "-", ":", "-").Replace(repoTag))
	if err != nil {
		t.Fatal(err)
	}
	bref, err := name.ParseReference(baseRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	base, err := remote.Image(bref, basic, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	baseLayers, err := base.Layers()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	big := bigTar(t, seed)
	opts := []tarball.LayerOption{tarball.WithMediaType(types.OCILayer)}
	if estargz {
		opts = append(opts, tarball.WithEstargz)
	}
	var layers []ggcr.Layer
	for _, open := range []tarball.Opener{
		func() (io.ReadCloser, error) { return baseLayers[0].Uncompressed() },
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(big)), nil },
	} {
		l, err := tarball.LayerFromOpener(open, opts...)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layers...)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, cfg.Config); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg.Addr()+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, basic, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.String(), m.Layers[1]
}

// bigTar is a layer tar of one incompressible file, /big.bin, made from
// seed.
func bigTar(t *testing.T, seed int64) []byte {
	t.Helper()
	data := make([]byte, bigFileSize)
	rand.New(rand.NewSource(seed)).Read(data)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
