package mirror

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

type staticPeers []Peer

func (s staticPeers) Peers() []Peer { return s }

// registry is the fallback fetcher: it has every blob and counts what it
// was asked.
type registry struct {
	mu    sync.Mutex
	blobs map[string][]byte
	asked []string
}

func (r *registry) Fetch(_ context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, desc.Digest.String())
	b, ok := r.blobs[desc.Digest.String()]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// counting wraps a peer's handler, counting its requests.
type counting struct {
	n atomic.Int32
	h http.Handler
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.h.ServeHTTP(w, r)
}

// corrupt serves every blob as bytes of the right length but the wrong
// content.
func corrupt(sizes map[string]int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := strings.LastIndex(r.URL.Path, "/")
		n, ok := sizes[r.URL.Path[i+1:]]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(n))
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
	})
}

// downAddr is a loopback address nothing listens on.
func downAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

type fixture struct {
	p     *testPKI
	clk   *clocktesting.FakeClock
	reg   *registry
	local content.Store // the pulling node's
	blobs []ocispec.Descriptor
	data  map[string][]byte
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{p: newTestPKI(t), clk: clocktesting.NewFakeClock(time.Now()), local: newStore(t), data: map[string][]byte{}}
	for i, mt := range []string{ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageConfig, ocispec.MediaTypeImageLayerGzip} {
		b := []byte(fmt.Sprintf("content %d of the image, %s", i, strings.Repeat("z", 1000*i)))
		f.data[string(mt)] = b
		f.blobs = append(f.blobs, ocispec.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: digest.FromBytes(b)})
	}
	f.reg = &registry{blobs: map[string][]byte{}}
	for _, d := range f.blobs {
		f.reg.blobs[d.Digest.String()] = f.data[d.MediaType]
	}
	return f
}

// peerWith is a node's mirror holding the image's blobs.
func (f *fixture) peerWith(t *testing.T, name string) (Peer, *counting) {
	cs := newStore(t)
	for _, d := range f.blobs {
		put(t, cs, d.MediaType, f.data[d.MediaType])
	}
	return f.peer(t, name, storeHandler(t, contentStore{cs}))
}

func (f *fixture) peer(t *testing.T, name string, h http.Handler) (Peer, *counting) {
	c := &counting{h: h}
	srv := peerServer(t, f.p, name, c)
	return Peer{Name: name, Addr: srv.Listener.Addr().String()}, c
}

func (f *fixture) sizes() map[string]int {
	m := map[string]int{}
	for _, d := range f.blobs {
		m[d.Digest.String()] = int(d.Size)
	}
	return m
}

// pull fetches the image's blobs as containerd's pull does (its fetch
// handler, into the local store) through the mirror's fetcher.
func (f *fixture) pull(t *testing.T, peers Peers) *Mirror {
	t.Helper()
	cert := f.p.issue(t, "system:node:self", []string{"system:nodes"}, false)
	m := New(Config{Peers: peers, TLS: f.p.clientTLS(&cert), Clock: f.clk})
	fetcher := m.Fetcher("127.0.0.1:5000/library/app:v1", f.reg, f.local)
	for _, d := range f.blobs {
		if _, err := remotes.FetchHandler(f.local, fetcher)(context.Background(), d); err != nil {
			t.Fatalf("fetch %s: %v", d.MediaType, err)
		}
	}
	for _, d := range f.blobs {
		got, err := content.ReadBlob(context.Background(), f.local, d)
		if err != nil || !bytes.Equal(got, f.data[d.MediaType]) {
			t.Errorf("%s in the node's store: %q %v", d.MediaType, got, err)
		}
	}
	// Nothing a peer sent is left half-written. (The pull's own empty
	// ingests, of a fetch answered AlreadyExists, are its lease's, which
	// containerd's garbage collector removes with it.)
	if st, err := f.local.ListStatuses(context.Background(), `ref~="^hostlet-mirror-"`); err != nil || len(st) != 0 {
		t.Errorf("ingests of the mirror left: %+v %v", st, err)
	}
	return m
}

func (f *fixture) size() float64 {
	var n int64
	for _, d := range f.blobs {
		n += d.Size
	}
	return float64(n)
}

// fetched are the mirror's bytes by source.
func fetched(m *Mirror) (peer, registry float64) {
	return testutil.ToFloat64(m.fetched.WithLabelValues("peer")), testutil.ToFloat64(m.fetched.WithLabelValues("registry"))
}

func TestFetchFromPeer(t *testing.T) {
	f := newFixture(t)
	good, goodC := f.peerWith(t, "good")
	m := f.pull(t, staticPeers{good})
	if peer, reg := fetched(m); peer != f.size() || reg != 0 {
		t.Errorf("fetched bytes: %v from peers, %v from the registry; want %v, 0", peer, reg, f.size())
	}
	if n := f.reg.count(); n != 0 {
		t.Errorf("registry asked %d times, want none: %v", n, f.reg.asked)
	}
	if n := goodC.n.Load(); n != 3 {
		t.Errorf("peer asked %d times, want 3", n)
	}
}

// A corrupt peer and a down one are skipped, whatever the order the blobs
// ask them in, and the good peer serves all.
func TestFetchSkipsCorruptAndDownPeers(t *testing.T) {
	f := newFixture(t)
	good, _ := f.peerWith(t, "good")
	bad, badC := f.peer(t, "bad", corrupt(f.sizes()))
	down := Peer{Name: "down", Addr: downAddr(t)}
	m := f.pull(t, staticPeers{bad, down, good})
	if got := testutil.ToFloat64(m.skipped); got < 1 {
		t.Errorf("peers skipped: %v, want the down one at least", got)
	}
	if n := f.reg.count(); n != 0 {
		t.Errorf("registry asked %d times, want none: %v", n, f.reg.asked)
	}
	// The corrupt peer, once caught, is not asked again within its back-off.
	if n := badC.n.Load(); n > 1 {
		t.Errorf("corrupt peer asked %d times, want at most once", n)
	}
}

// With no peer that has the content, the registry serves it; the corrupt
// peer is asked once, then backed off until the period is over.
func TestFetchFallsBackToRegistry(t *testing.T) {
	f := newFixture(t)
	bad, badC := f.peer(t, "bad", corrupt(f.sizes()))
	down := Peer{Name: "down", Addr: downAddr(t)}
	m0 := f.pull(t, staticPeers{bad, down})
	if peer, reg := fetched(m0); peer != 0 || reg != f.size() {
		t.Errorf("fetched bytes: %v from peers, %v from the registry; want 0, %v", peer, reg, f.size())
	}
	if n := f.reg.count(); n != 3 {
		t.Errorf("registry asked %d times, want 3", n)
	}
	if n := badC.n.Load(); n != 1 {
		t.Errorf("corrupt peer asked %d times, want once", n)
	}

	// A second node's pull, the same Mirror after the back-off: asked again.
	cert := f.p.issue(t, "system:node:self", []string{"system:nodes"}, false)
	m := New(Config{Peers: staticPeers{bad}, TLS: f.p.clientTLS(&cert), Clock: f.clk})
	fetch := func() {
		t.Helper()
		cs := newStore(t)
		if _, err := remotes.FetchHandler(cs, m.Fetcher("app", f.reg, cs))(context.Background(), f.blobs[2]); err != nil {
			t.Fatal(err)
		}
	}
	before := badC.n.Load()
	fetch()
	fetch()
	if n := badC.n.Load() - before; n != 1 {
		t.Errorf("corrupt peer asked %d times in its back-off, want once", n)
	}
	f.clk.Step(peerBackoff)
	fetch()
	if n := badC.n.Load() - before; n != 2 {
		t.Errorf("corrupt peer asked %d times after its back-off, want twice", n)
	}
}

// Peers without the blob are asked up to maxMisses, then the registry.
func TestFetchMissLimit(t *testing.T) {
	f := newFixture(t)
	var peers staticPeers
	var total atomic.Int32
	for i := 0; i < maxMisses+3; i++ {
		p, _ := f.peer(t, fmt.Sprintf("empty-%d", i), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			total.Add(1)
			http.NotFound(w, r)
		}))
		peers = append(peers, p)
	}
	f.pull(t, peers)
	if n := total.Load(); n != int32(3*maxMisses) {
		t.Errorf("peers asked %d times, want %d per blob", n, maxMisses)
	}
	if n := f.reg.count(); n != 3 {
		t.Errorf("registry asked %d times, want 3", n)
	}
}

// A peer whose serving certificate is not a node's is not trusted.
func TestFetchRefusesNonNodePeer(t *testing.T) {
	f := newFixture(t)
	cs := newStore(t)
	for _, d := range f.blobs {
		put(t, cs, d.MediaType, f.data[d.MediaType])
	}
	c := &counting{h: storeHandler(t, contentStore{cs})}
	srv := newTLSServer(t, f.p.serverTLS(f.p.issue(t, "evil", nil, true)), c)
	f.pull(t, staticPeers{{Name: "evil", Addr: srv.Listener.Addr().String()}})
	if n := f.reg.count(); n != 3 {
		t.Errorf("registry asked %d times, want 3", n)
	}
	if n := c.n.Load(); n != 0 {
		t.Errorf("non-node peer served %d requests", n)
	}
}

// A pull before the Nodes are listed waits for the list; one that waited
// syncWait in vain goes to the registry, and no later pull waits.
func TestFetchWaitsForPeers(t *testing.T) {
	f := newFixture(t)
	good, _ := f.peerWith(t, "good")
	cert := f.p.issue(t, "system:node:self", []string{"system:nodes"}, false)
	var listed atomic.Bool
	peers := peersFunc(func() []Peer {
		if listed.Load() {
			return []Peer{good}
		}
		return nil
	})
	fetchAsync := func(m *Mirror, cs content.Store, d ocispec.Descriptor) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := remotes.FetchHandler(cs, m.Fetcher("app", f.reg, cs))(context.Background(), d)
			done <- err
		}()
		for !f.clk.HasWaiters() {
			goruntime.Gosched()
		}
		return done
	}

	synced := make(chan struct{})
	m := New(Config{Peers: peers, TLS: f.p.clientTLS(&cert), Clock: f.clk, Synced: synced})
	done := fetchAsync(m, newStore(t), f.blobs[0])
	listed.Store(true)
	close(synced)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.reg.count(); n != 0 {
		t.Errorf("registry asked %d times once the peers were listed, want none", n)
	}

	listed.Store(false)
	m = New(Config{Peers: peers, TLS: f.p.clientTLS(&cert), Clock: f.clk, Synced: make(chan struct{})})
	done = fetchAsync(m, newStore(t), f.blobs[0])
	f.clk.Step(syncWait)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.reg.count(); n != 1 {
		t.Errorf("registry asked %d times after the wait, want once", n)
	}
	// No wait now: this returns without the clock moving.
	cs := newStore(t)
	if _, err := remotes.FetchHandler(cs, m.Fetcher("app", f.reg, cs))(context.Background(), f.blobs[1]); err != nil {
		t.Fatal(err)
	}
}

type peersFunc func() []Peer

func (p peersFunc) Peers() []Peer { return p() }
