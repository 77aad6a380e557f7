package runtime

import (
	"context"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// PeerFetcher puts a node-local registry mirror before the registry in a
// pull (Config.Mirror): given the registry's fetcher for ref and the
// node's content store, it returns the fetcher the pull uses. The tag is
// still resolved at the registry; only content addressed by digest goes
// through it.
type PeerFetcher interface {
	Fetcher(ref string, registry remotes.Fetcher, store content.Store) remotes.Fetcher
	// Pulling marks a pull of ref under way until done is called: peers
	// asking for a blob of it may wait for the pull to fetch it.
	Pulling(ref string) (done func())
}

// peerResolver is the registry's resolver with its fetchers wrapped.
type peerResolver struct {
	remotes.Resolver
	peers PeerFetcher
	store content.Store
}

func (p peerResolver) Fetcher(ctx context.Context, ref string) (remotes.Fetcher, error) {
	f, err := p.Resolver.Fetcher(ctx, ref)
	if err != nil {
		return nil, err
	}
	return p.peers.Fetcher(ref, f, p.store), nil
}

// withMirror wraps a pull's resolver when the node has a mirror.
func (r *Runtime) withMirror(res remotes.Resolver) remotes.Resolver {
	if r.mirror == nil {
		return res
	}
	return peerResolver{Resolver: res, peers: r.mirror, store: r.client.ContentStore()}
}

// mirrorPulling tells the mirror a pull of ref is under way, until done.
func (r *Runtime) mirrorPulling(ref string) (done func()) {
	if r.mirror == nil {
		return func() {}
	}
	return r.mirror.Pulling(ref)
}

// Blob opens committed content of hostlet's namespace by digest (what the
// node's mirror serves); an error satisfying errdefs.IsNotFound when the
// node has none.
func (r *Runtime) Blob(ctx context.Context, dgst digest.Digest) (content.ReaderAt, error) {
	return r.client.ContentStore().ReaderAt(ctx, ocispec.Descriptor{Digest: dgst})
}
