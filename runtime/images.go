package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image is a local image ready to run.
type Image struct {
	// Ref is the normalized name ("docker.io/library/busybox:latest").
	Ref string
	// ID is what the kubelet reports as imageID: the repo digest when known,
	// else the config digest.
	ID     string
	Size   int64
	Config ocispec.ImageConfig
	image  containerd.Image
}

// ErrInvalidImageName marks a reference that cannot be parsed.
var ErrInvalidImageName = errors.New("invalid image name")

// NormalizeImage turns "busybox" into "docker.io/library/busybox:latest".
func NormalizeImage(ref string) (string, error) {
	n, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidImageName, ref, err)
	}
	return n.String(), nil
}

// GetImage returns a local image, or an error satisfying errdefs.IsNotFound.
func (r *Runtime) GetImage(ctx context.Context, ref string) (*Image, error) {
	name, err := NormalizeImage(ref)
	if err != nil {
		return nil, err
	}
	img, err := r.client.GetImage(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.describe(ctx, img)
}

// described caches describe's answers by image name and manifest digest:
// what it reads is content-addressed, so an entry never goes stale, and in
// a burst every pod of an image would otherwise read the same manifest and
// config from containerd again (a dozen calls). Bounded: cleared when full.
var described struct {
	sync.Mutex
	m map[string]*Image
}

const describedMax = 512

func (r *Runtime) describe(ctx context.Context, img containerd.Image) (*Image, error) {
	key := img.Name() + "@" + img.Target().Digest.String()
	described.Lock()
	d, ok := described.m[key]
	described.Unlock()
	if ok {
		cp := *d
		cp.image = img
		return &cp, nil
	}
	d, err := r.readImage(ctx, img)
	if err != nil {
		return nil, err
	}
	described.Lock()
	if described.m == nil || len(described.m) >= describedMax {
		described.m = map[string]*Image{}
	}
	described.m[key] = d
	described.Unlock()
	cp := *d
	return &cp, nil
}

func (r *Runtime) readImage(ctx context.Context, img containerd.Image) (*Image, error) {
	spec, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading image config of %s: %w", img.Name(), err)
	}
	size, _ := img.Size(ctx)
	cfg, err := img.Config(ctx)
	if err != nil {
		return nil, err
	}
	id := cfg.Digest.String()
	if named, err := reference.ParseNormalizedNamed(img.Name()); err == nil {
		id = reference.TrimNamed(named).String() + "@" + img.Target().Digest.String()
	}
	return &Image{Ref: img.Name(), ID: id, Size: size, Config: spec.Config, image: img}, nil
}

// Credentials for one pull: what is offered to a registry host asking for
// authentication (podspec tries the pod's and the node's in turn).
type Credentials func(host string) (user, secret string, err error)

// PullImage pulls and unpacks an image through the registry hosts config.
func (r *Runtime) PullImage(ctx context.Context, ref string, creds Credentials) (*Image, time.Duration, error) {
	name, err := NormalizeImage(ref)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	hostOpts := config.HostOptions{Credentials: creds}
	if r.registries != "" {
		hostOpts.HostDir = config.HostDirFromRoot(r.registries)
	}
	resolver := r.withMirror(docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx, hostOpts)}))
	lazy := r.lazyPullOpts(ctx, name, creds)
	if len(lazy) == 0 {
		// Peers may wait for this pull's blobs. Not a lazy pull's: the
		// snapshotter fetches its layers, not the pull.
		defer r.mirrorPulling(name)()
	}
	opts := append([]containerd.RemoteOpt{containerd.WithResolver(resolver), containerd.WithPullUnpack}, lazy...)
	img, err := r.client.Pull(ctx, name, opts...)
	if err != nil {
		return nil, 0, err
	}
	desc, err := r.describe(ctx, img)
	return desc, time.Since(start), err
}

// ensureUnpacked makes an imported image usable for a snapshot.
func (r *Runtime) ensureUnpacked(ctx context.Context, img containerd.Image) error {
	ok, err := img.IsUnpacked(ctx, "")
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	if ok {
		return nil
	}
	return img.Unpack(ctx, "")
}
