package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	goruntime "runtime"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// readN reads exactly n bytes of r.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

// A reader of a flight gets the bytes as they are written, and the whole
// blob once its digest matched.
func TestFlightStreams(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	fs := newFlights(t.TempDir())
	fl := fs.start(digest.FromBytes(data), int64(len(data)))
	if fl == nil {
		t.Fatal("no flight")
	}
	if again := fs.start(digest.FromBytes(data), int64(len(data))); again != nil {
		t.Fatal("a second flight of the same blob")
	}
	got, _, _ := fs.lookup(fl.dgst, "app")
	if got != fl {
		t.Fatal("the flight is not found")
	}
	rd := got.newReader(context.Background())
	defer rd.Close()

	fl.write(data[:4000])
	if b := readN(t, rd, 4000); !bytes.Equal(b, data[:4000]) {
		t.Fatal("the first bytes differ")
	}
	rest := make(chan []byte)
	go func() {
		b, err := io.ReadAll(rd)
		if err != nil {
			t.Errorf("reading the rest: %v", err)
		}
		rest <- b
	}()
	fl.write(data[4000:7000])
	fl.write(data[7000:])
	if b := <-rest; !bytes.Equal(b, data[4000:]) {
		t.Fatalf("the rest: %d bytes, want %d", len(b), len(data)-4000)
	}
	fl.finish()
	if got, _, _ := fs.lookup(fl.dgst, "app"); got != nil {
		t.Error("the flight is still found after it finished")
	}
}

// An abandoned flight fails its readers; one whose bytes do not match the
// digest never gives its last byte.
func TestFlightAbortAndMismatch(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefghij"), 100)
	fs := newFlights(t.TempDir())

	fl := fs.start(digest.FromBytes(data), int64(len(data)))
	rd := fl.newReader(context.Background())
	fl.acquire()
	fl.write(data[:300])
	readN(t, rd, 300)
	done := make(chan error)
	go func() {
		_, err := io.ReadAll(rd)
		done <- err
	}()
	fl.finish() // the fetch ended before the blob was whole
	if err := <-done; !errors.Is(err, errAborted) {
		t.Errorf("reader of an abandoned flight: %v, want %v", err, errAborted)
	}
	rd.Close()

	bad := bytes.Repeat([]byte("x"), len(data))
	fl = fs.start(digest.FromBytes(data), int64(len(data)))
	rd = fl.newReader(context.Background())
	fl.acquire()
	defer rd.Close()
	fl.write(bad)
	b, err := io.ReadAll(rd)
	if err == nil || len(b) >= len(data) {
		t.Errorf("reader of a corrupt flight: %d bytes, %v; want fewer than %d and an error", len(b), err, len(data))
	}
	fl.finish()
}

// meshNode is a node of a test cluster of mirrors: its Mirror, store and
// served address.
type meshNode struct {
	name  string
	m     *Mirror
	store content.Store
	peer  Peer
}

// mesh makes nodes with the given names, each the others' peer.
func (f *fixture) mesh(t *testing.T, names ...string) []*meshNode {
	var nodes []*meshNode
	for _, name := range names {
		n := &meshNode{name: name, store: newStore(t)}
		cert := f.p.issue(t, "system:node:"+name, []string{"system:nodes"}, false)
		n.m = New(Config{Peers: peersFunc(func() []Peer {
			var out []Peer
			for _, o := range nodes {
				if o != n {
					out = append(out, o.peer)
				}
			}
			return out
		}), TLS: f.p.clientTLS(&cert), Clock: f.clk, Self: name, Dir: t.TempDir()})
		srv := peerServer(t, f.p, name, n.m.Handler(contentStore{n.store}))
		n.peer = Peer{Name: name, Addr: srv.Listener.Addr().String()}
		nodes = append(nodes, n)
	}
	return nodes
}

const testRef = "127.0.0.1:5000/library/app:v1"

// pullOn fetches the image's blobs on n as containerd's pull does (the
// layer and config at once, after the manifest) with the pull marked.
func (f *fixture) pullOn(t *testing.T, n *meshNode, reg remotes.Fetcher) error {
	done := n.m.Pulling(testRef)
	defer done()
	fetcher := n.m.Fetcher(testRef, reg, n.store)
	h := remotes.FetchHandler(n.store, fetcher)
	if _, err := h(context.Background(), f.blobs[0]); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, d := range f.blobs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h(context.Background(), d); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	for _, d := range f.blobs {
		got, err := content.ReadBlob(context.Background(), n.store, d)
		if err != nil || !bytes.Equal(got, f.data[d.MediaType]) {
			return fmt.Errorf("%s on %s: %q %v", d.MediaType, n.name, got, err)
		}
	}
	return nil
}

// gatedRegistry holds each blob's fetch (not the manifest's) until the gate opens, so pulls overlap
// whatever the scheduling.
type gatedRegistry struct {
	*registry
	gate chan struct{}
}

func (g gatedRegistry) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	rc, err := g.registry.Fetch(ctx, desc)
	if err != nil || isManifest(desc) {
		return rc, err
	}
	return &gatedBody{rc: rc, gate: g.gate}, nil
}

type gatedBody struct {
	rc   io.ReadCloser
	gate chan struct{}
}

func (b *gatedBody) Read(p []byte) (int, error) {
	<-b.gate
	return b.rc.Read(p)
}

func (b *gatedBody) Close() error { return b.rc.Close() }

// Three nodes pulling one image at once fetch each blob from the registry
// once: the blob's owner fetches it, the others stream it from its flight
// (the registry's bytes held until all asked, so none is done before the
// others start). Manifests are not shared: each node's pull fetches its
// own.
func TestSimultaneousPullsFetchOnce(t *testing.T) {
	f := newFixture(t)
	nodes := f.mesh(t, "a", "b", "c")
	reg := gatedRegistry{f.reg, make(chan struct{})}
	// The three pulls are under way before any fetches: they are at once.
	for _, n := range nodes {
		defer n.m.Pulling(testRef)()
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.pullOn(t, n, reg); err != nil {
				t.Error(err)
			}
		}()
	}
	// Before the registry sends a byte, the two other nodes stream each
	// blob from its owner's flight: its writer and two readers.
	for _, d := range f.blobs[1:] {
		for attached := false; !attached; goruntime.Gosched() {
			for _, n := range nodes {
				if fl, _, _ := n.m.flights.lookup(d.Digest, ""); fl != nil {
					fl.mu.Lock()
					attached = attached || fl.refs == 1+3
					fl.mu.Unlock()
					fl.release()
				}
			}
		}
	}
	close(reg.gate)
	wg.Wait()
	counts := map[string]int{}
	for _, d := range f.reg.asked {
		counts[d]++
	}
	for _, d := range f.blobs {
		got := counts[d.Digest.String()]
		// A manifest is not shared in flight: a node whose peer has it
		// committed already gets it there, the others at the registry.
		if isManifest(d) && (got < 1 || got > 3) || !isManifest(d) && got != 1 {
			t.Errorf("registry asked for the %s %d times", d.MediaType, got)
		}
	}
	var fromPeers float64
	for _, n := range nodes {
		p, _ := fetched(n.m)
		fromPeers += p
		if got := testutil.ToFloat64(n.m.skipped); got != 0 {
			t.Errorf("%s skipped %v peers", n.name, got)
		}
	}
	if want := float64(2 * (f.blobs[1].Size + f.blobs[2].Size)); fromPeers < want {
		t.Errorf("bytes from peers: %v, want at least %v", fromPeers, want)
	}
}

// ordered names two nodes so that the first comes before the second in
// dgst's order: the first is the owner of the blob.
func ordered(dgst digest.Digest) (owner, other string) {
	if before(dgst.String(), "a", "b") {
		return "a", "b"
	}
	return "b", "a"
}

// The owner of a blob that has no pull of the image in progress says "not
// here" at once: the other node fetches from the registry without waiting
// (the fake clock never moves). One that is pulling the repository but
// never fetches the blob answers after ownerWait.
func TestOwnerNotPulling(t *testing.T) {
	f := newFixture(t)
	layer := f.blobs[2]
	ownerName, otherName := ordered(layer.Digest)
	nodes := f.mesh(t, ownerName, otherName)
	owner, other := nodes[0], nodes[1]
	fetch := func() error {
		_, err := remotes.FetchHandler(other.store, other.m.Fetcher(testRef, f.reg, other.store))(context.Background(), layer)
		return err
	}
	if err := fetch(); err != nil {
		t.Fatal(err)
	}
	if n := f.reg.count(); n != 1 {
		t.Fatalf("registry asked %d times, want once", n)
	}

	other.store = newStore(t)
	done := owner.m.Pulling(testRef)
	defer done()
	errc := make(chan error)
	go func() { errc <- fetch() }()
	for !f.clk.HasWaiters() {
		goruntime.Gosched()
	}
	f.clk.Step(ownerWait)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := f.reg.count(); n != 2 {
		t.Errorf("registry asked %d times, want twice", n)
	}
	if got := testutil.ToFloat64(other.m.skipped); got != 0 {
		t.Errorf("the owner was skipped as failed: %v", got)
	}
}

// A peer whose flight turns out not to be the blob (its bytes do not match
// the digest) cuts its answer: the node fetches the blob from the
// registry. And a peer's flight streams to a node as it arrives.
func TestFlightFromPeer(t *testing.T) {
	f := newFixture(t)
	layer := f.blobs[2]
	data := f.data[layer.MediaType]
	nodes := f.mesh(t, "peer", "self")
	peer, self := nodes[0], nodes[1]

	// As it arrives: read over the peer's handler as a node does.
	fl := peer.m.flights.start(layer.Digest, layer.Size)
	fl.write(data[:500])
	cert := f.p.issue(t, "system:node:x", []string{"system:nodes"}, false)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: f.p.clientTLS(&cert)}}
	resp, err := client.Get("https://" + peer.peer.Addr + "/v2/library/app/blobs/" + layer.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ContentLength != layer.Size {
		t.Fatalf("peer answered %s, length %d", resp.Status, resp.ContentLength)
	}
	if b := readN(t, resp.Body, 500); !bytes.Equal(b, data[:500]) {
		t.Fatal("the first bytes differ")
	}
	fl.write(data[500:])
	if b, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(b, data[500:]) {
		t.Fatalf("the rest: %d bytes, %v", len(b), err)
	}
	resp.Body.Close()
	fl.finish()

	// Corrupt: the right length, the wrong bytes.
	fl = peer.m.flights.start(layer.Digest, layer.Size)
	defer fl.finish()
	fl.write(bytes.Repeat([]byte("x"), len(data)))
	if _, err := remotes.FetchHandler(self.store, self.m.Fetcher(testRef, f.reg, self.store))(context.Background(), layer); err != nil {
		t.Fatal(err)
	}
	if got, err := content.ReadBlob(context.Background(), self.store, layer); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the layer in the store: %v", err)
	}
	if n := f.reg.count(); n != 1 {
		t.Errorf("registry asked %d times, want once", n)
	}
	if got := testutil.ToFloat64(self.m.skipped); got != 1 {
		t.Errorf("peers skipped: %v, want the corrupt one", got)
	}
	if st, err := self.store.ListStatuses(context.Background(), `ref~="^hostlet-mirror-"`); err != nil || len(st) != 0 {
		t.Errorf("ingests of the mirror left: %+v %v", st, err)
	}
}
