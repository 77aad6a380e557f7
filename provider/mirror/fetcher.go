package mirror

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
)

// Peer is another node's mirror.
type Peer struct {
	// Name is the node's name; Addr its host:port (InternalIP and the
	// kubelet port it advertises).
	Name, Addr string
}

// Peers are the other nodes of the moment.
type Peers interface {
	Peers() []Peer
}

// Config says how to reach the peers.
type Config struct {
	Peers Peers
	// TLS is the node's client side: its client certificate (the one it
	// talks to the API server with) and the cluster CA as the roots a
	// peer's serving certificate is verified against.
	TLS *tls.Config
	// Synced, if set, is closed once Peers has listed the Nodes: a pull
	// before then (a static pod's, on a node just started) waits for it,
	// up to syncWait, once.
	Synced <-chan struct{}
	Clock  clock.Clock
	// Self is this node's name: with the peers', the names the owner of
	// a blob is chosen among (see Mirror.fromPeers). Empty: no owner is
	// waited for.
	Self string
	// Dir holds the files of the blobs in flight (unlinked as soon as
	// made); the system's temporary directory if empty.
	Dir string
}

const (
	// maxMisses is how many peers that answer "not here" are asked for
	// one blob before the registry is: each is a round trip, and in a
	// large cluster most peers lack a given blob.
	maxMisses = 4
	// peerBackoff is how long a peer that failed (down, refused us, served
	// a corrupt blob) is left out: it costs a pull one attempt per period,
	// not one per blob.
	peerBackoff = time.Minute
	// syncWait is how long the first pull waits for the Nodes' list.
	syncWait = 10 * time.Second
	// ownerWait bounds how long a blob's owner, asked by a node that
	// ranks below it, waits for its own pull to start fetching the blob
	// (see Mirror.fromPeers): its pull fetches the image's layers at
	// once, so a blob it is to fetch starts within moments; a blob it
	// never fetches (another tag of the repository, without that layer)
	// costs the asking node this long before the registry.
	ownerWait = 5 * time.Second
	// waitHeader asks a peer to wait up to ownerWait for a blob its
	// pull of the repository is about to fetch.
	waitHeader = "Hostlet-Mirror-Wait"
)

// Mirror is the client side: the fetchers that ask peers first.
type Mirror struct {
	peers   Peers
	self    string
	client  *http.Client
	clock   clock.Clock
	synced  <-chan struct{}
	gaveUp  atomic.Bool
	flights *flights

	mu   sync.Mutex
	down map[string]time.Time // peer name -> until

	// fetched counts the bytes of the pulls' content by where it came
	// from; skipped the peers left out after a failure.
	fetched *prometheus.CounterVec
	skipped prometheus.Counter
}

// New makes the mirror's client side.
func New(cfg Config) *Mirror {
	tlsCfg := cfg.TLS.Clone()
	// A peer's serving certificate names its IP (the CA's checks) and
	// must be a node's, as the approver issues them.
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer has no certificate")
		}
		subj := cs.PeerCertificates[0].Subject
		if !strings.HasPrefix(subj.CommonName, "system:node:") || !slices.Contains(subj.Organization, "system:nodes") {
			return fmt.Errorf("peer's certificate is for %q, not a node", subj.CommonName)
		}
		return nil
	}
	rt := &http.Transport{
		TLSClientConfig: tlsCfg,
		// A peer that does not answer soon is skipped: the registry is
		// the fallback, not a long wait.
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	dir := cfg.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	return &Mirror{peers: cfg.Peers, self: cfg.Self, client: &http.Client{Transport: rt}, clock: clk, synced: cfg.Synced, down: map[string]time.Time{},
		flights: newFlights(dir),
		fetched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostlet_registry_mirror_fetched_bytes_total",
			Help: "Bytes of content pulled by digest, by source: peer (another node's mirror) or registry.",
		}, []string{"source"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hostlet_registry_mirror_peer_failures_total",
			Help: "Peers skipped after a failure (down, refusing, not a node, or serving content that did not match its digest).",
		}),
	}
}

// Metrics are the mirror's collectors, for the kubelet API's /metrics.
func (m *Mirror) Metrics() []prometheus.Collector {
	return []prometheus.Collector{m.fetched, m.skipped}
}

// Fetcher wraps the registry's fetcher for ref (runtime.PeerFetcher):
// content is asked of peers first, written to store only once its digest
// checked, and fetched from the registry when no peer has it.
func (m *Mirror) Fetcher(ref string, registry remotes.Fetcher, store content.Store) remotes.Fetcher {
	return &fetcher{m: m, name: repository(ref), registry: registry, store: store}
}

// Pulling marks a pull of ref under way on the node until done is called
// (runtime.PeerFetcher): while it is, a peer asking this node for a blob
// of the repository it does not have yet may wait for it to come (the
// pull is about to fetch it); otherwise it is told "not here" at once.
func (m *Mirror) Pulling(ref string) (done func()) {
	return m.flights.pulling(repository(ref))
}

// repository is the name a ref's content is asked of peers under (the
// path of /v2/<name>/blobs/...), the registry's host left out.
func repository(ref string) string {
	if n, err := reference.ParseNormalizedNamed(ref); err == nil {
		return reference.Path(n)
	}
	return ref
}

type fetcher struct {
	m        *Mirror
	name     string
	registry remotes.Fetcher
	store    content.Store
}

// errMiss is a peer without the blob.
var errMiss = errors.New("not on the peer")

// Fetch gets desc from a peer into the store, and then answers
// AlreadyExists, which the pull's fetch handler takes as done (the content
// is there, checked: nothing is written twice); else the registry's
// stream.
func (f *fetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	peer, err := f.m.fromPeers(ctx, f.name, desc, f.store)
	if err == nil {
		f.m.fetched.WithLabelValues("peer").Add(float64(desc.Size))
		return nil, fmt.Errorf("%s from peer %s: %w", desc.Digest, peer, errdefs.ErrAlreadyExists)
	}
	if errdefs.IsAlreadyExists(err) {
		return nil, err
	}
	// The bytes are shared with peers as they come (the flight starts
	// before the registry answers: an owner's peers waiting for it
	// attach at once).
	var fl *flight
	if !isManifest(desc) {
		fl = f.m.flights.start(desc.Digest, desc.Size)
	}
	rc, err := f.registry.Fetch(ctx, desc)
	if err != nil {
		if fl != nil {
			fl.finish()
		}
		return nil, err
	}
	tee := &teeReader{rc: rc, c: f.m.fetched.WithLabelValues("registry"), fl: fl}
	if s, ok := rc.(io.Seeker); ok {
		// containerd resumes an interrupted ingest by seeking.
		return seekingTee{tee, s}, nil
	}
	return tee, nil
}

// teeReader counts what is read through it and copies it to the blob's
// flight, which it ends when closed: containerd closes the fetch's reader
// after committing the content, so from then on peers find it in the
// store.
type teeReader struct {
	rc  io.ReadCloser
	c   prometheus.Counter
	fl  *flight // nil: not shared
	pos int64
}

func (r *teeReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.c.Add(float64(n))
	if r.fl != nil {
		r.fl.write(p[:n])
	}
	r.pos += int64(n)
	return n, err
}

func (r *teeReader) Close() error {
	err := r.rc.Close()
	if r.fl != nil {
		r.fl.finish()
		r.fl = nil
	}
	return err
}

type seekingTee struct {
	*teeReader
	s io.Seeker
}

// Seek moves the registry's stream; the flight, which has the bytes from
// the start only, is abandoned unless it stays where it was.
func (r seekingTee) Seek(off int64, whence int) (int64, error) {
	n, err := r.s.Seek(off, whence)
	if r.fl != nil && (err != nil || n != r.pos) {
		r.fl.abort(errors.New("the fetch resumed at another offset"))
	}
	if err == nil {
		r.pos = n
	}
	return n, err
}

func isManifest(desc ocispec.Descriptor) bool {
	return images.IsManifestType(desc.MediaType) || images.IsIndexType(desc.MediaType)
}

// fromPeers tries the peers in the blob's order; the name of the peer that
// had it, or an error.
func (m *Mirror) fromPeers(ctx context.Context, name string, desc ocispec.Descriptor, store content.Store) (string, error) {
	if desc.Size <= 0 {
		return "", errMiss
	}
	if _, err := store.Info(ctx, desc.Digest); err == nil {
		return "", fmt.Errorf("%s: %w", desc.Digest, errdefs.ErrAlreadyExists)
	}
	m.waitPeers(ctx)
	// Nodes pulling one image at once would each fetch its blobs from
	// the registry, none having them yet. So each blob has an owner: of
	// this node and its peers, the first in the blob's rendezvous order
	// that is pulling. This node asks the peers before it in that order
	// to wait for the blob (an owner whose pull is about to fetch it
	// answers once it starts, streaming it as it arrives); the peers
	// after it only whether they have it, whole or in flight. When no
	// peer before it is pulling the image, they answer "not here" at
	// once, and this node, the owner, fetches the blob from the registry
	// (sharing it as it comes), without waiting for anyone.
	key := desc.Digest.String()
	misses := 0
	for _, p := range m.candidates(key) {
		if misses >= maxMisses {
			break
		}
		wait := m.self != "" && !isManifest(desc) && before(key, p.Name, m.self)
		err := m.fetchFrom(ctx, p, name, desc, store, wait)
		switch {
		case err == nil || errdefs.IsAlreadyExists(err):
			log.WithFields(log.Fields{"peer": p.Name, "digest": desc.Digest, "size": desc.Size}).Debug("registry mirror: fetched from peer")
			return p.Name, nil
		case errors.Is(err, errMiss):
			misses++
		case ctx.Err() != nil:
			return "", ctx.Err()
		default:
			log.WithError(err).WithFields(log.Fields{"peer": p.Name, "digest": desc.Digest}).Warn("registry mirror: peer skipped")
			m.setDown(p.Name)
			m.skipped.Inc()
		}
	}
	return "", errMiss
}

// waitPeers waits for the Nodes' first list, unless a pull gave up on it
// before: then it is left to come (the Node list may be forbidden).
func (m *Mirror) waitPeers(ctx context.Context) {
	if m.synced == nil || m.gaveUp.Load() {
		return
	}
	t := m.clock.NewTimer(syncWait)
	defer t.Stop()
	select {
	case <-m.synced:
	case <-ctx.Done():
	case <-t.C():
		if !m.gaveUp.Swap(true) {
			log.Warn("registry mirror: the Nodes are not listed yet: pulling from the registry until they are")
		}
	}
}

// fetchFrom copies desc from peer p into the store under an ingest of its
// own; the commit checks size and digest, and a failed copy is aborted, so
// nothing a peer sends is kept unless it is the content asked for.
//
// wait asks the peer to wait for the blob if its pull is about to fetch it.
// What comes is shared with this node's own peers as it arrives, as the
// registry's is.
func (m *Mirror) fetchFrom(ctx context.Context, p Peer, name string, desc ocispec.Descriptor, store content.Store, wait bool) error {
	kind := "blobs"
	if isManifest(desc) {
		kind = "manifests"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.Addr+Prefix+name+"/"+kind+"/"+desc.Digest.String(), nil)
	if err != nil {
		return err
	}
	if kind == "manifests" {
		req.Header.Set("Accept", desc.MediaType+", */*")
	}
	if wait {
		req.Header.Set(waitHeader, "1")
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errMiss
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("peer answered %s", resp.Status)
	case resp.ContentLength >= 0 && resp.ContentLength != desc.Size:
		return fmt.Errorf("peer has %d bytes, want %d", resp.ContentLength, desc.Size)
	}
	ref := "hostlet-mirror-" + p.Name + "-" + desc.Digest.String()
	cw, err := content.OpenWriter(ctx, store, content.WithRef(ref), content.WithDescriptor(desc))
	if err != nil {
		return err
	}
	var body io.Reader = io.LimitReader(resp.Body, desc.Size)
	if kind == "blobs" {
		if fl := m.flights.start(desc.Digest, desc.Size); fl != nil {
			// Ended once the commit is done (or failed).
			defer fl.finish()
			body = io.TeeReader(body, flightWriter{fl})
		}
	}
	err = content.Copy(ctx, cw, body, desc.Size, desc.Digest)
	cw.Close()
	if err != nil {
		if aerr := store.Abort(context.WithoutCancel(ctx), ref); aerr != nil && !errdefs.IsNotFound(aerr) {
			log.WithError(aerr).WithField("ref", ref).Warn("registry mirror: aborting a failed ingest")
		}
		return err
	}
	return nil
}

// candidates are the peers not backed off, in the order of rendezvous
// hashing on the digest: each blob asks the peers in an order of its own,
// so the load of a popular image spreads, and the same blob asks the same
// peers first every time.
func (m *Mirror) candidates(key string) []Peer {
	peers := m.peers.Peers()
	now := m.clock.Now()
	m.mu.Lock()
	out := peers[:0:0]
	for _, p := range peers {
		if until, ok := m.down[p.Name]; ok {
			if now.Before(until) {
				continue
			}
			delete(m.down, p.Name)
		}
		out = append(out, p)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Peer) int { return order(key, a.Name, b.Name) })
	return out
}

// score is a node's rendezvous hash for key.
func score(key, node string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, key+"\x00"+node)
	return h.Sum64()
}

// order compares nodes a and b in key's rendezvous order: every node
// computes the same order for a blob, so the nodes pulling it agree on
// its owner without talking.
func order(key, a, b string) int {
	sa, sb := score(key, a), score(key, b)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	}
	return strings.Compare(a, b)
}

// before says whether node a comes before node b in key's order.
func before(key, a, b string) bool { return order(key, a, b) < 0 }

// flightWriter copies a peer's bytes into this node's flight.
type flightWriter struct{ fl *flight }

func (w flightWriter) Write(p []byte) (int, error) {
	w.fl.write(p)
	return len(p), nil
}

func (m *Mirror) setDown(name string) {
	m.mu.Lock()
	m.down[name] = m.clock.Now().Add(peerBackoff)
	m.mu.Unlock()
}
