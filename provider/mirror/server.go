// Package mirror is the node-local registry mirror (k3s's embedded Spegel,
// with peers found through the API): each node serves the content of its
// containerd store, read-only and by digest only, to the other nodes of the
// cluster over mTLS with node certificates, and its pulls ask the other
// nodes for content addressed by digest before the registry.
package mirror

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	log "github.com/sirupsen/logrus"
)

// Prefix is where the mirror is served: the OCI distribution API's own
// root, so a peer is an ordinary registry host to containerd (its hosts'
// default path).
const Prefix = "/v2/"

// Store is the node's content (runtime.Runtime).
type Store interface {
	// Blob opens committed content by digest; errdefs.IsNotFound when the
	// node has none.
	Blob(ctx context.Context, dgst digest.Digest) (content.ReaderAt, error)
}

// maxManifest bounds what is read of a manifest to find its media type
// (the distribution spec's own limit for manifests is 4 MiB).
const maxManifest = 4 << 20

// Handler serves GET and HEAD /v2/<name>/blobs/<digest> and
// /v2/<name>/manifests/<digest> from store to nodes of the cluster: the
// request must come with a client certificate the TLS server verified
// (against the client CA, the cluster's) that names a node (CN
// system:node:<name>, O system:nodes). The name is not looked at for what
// is served: the store is content-addressed. A tag is never served (404),
// so a peer cannot tell another node what a tag means; only the registry
// does. A blob this node's pulls are fetching is served as it arrives, and
// a peer that asks for a blob this node's pull of its repository is about
// to fetch waits for it (up to ownerWait).
func (m *Mirror) Handler(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		peer, ok := nodeOf(r)
		if !ok {
			status, code := http.StatusForbidden, "DENIED"
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
				status, code = http.StatusUnauthorized, "UNAUTHORIZED"
			}
			writeError(w, status, code, "only nodes of the cluster, with their client certificates")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the mirror is read-only")
			return
		}
		if r.URL.Path == Prefix || r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "{}")
			return
		}
		kind, name, ref, ok := parsePath(r.URL.Path)
		if !ok {
			writeError(w, http.StatusNotFound, "NAME_UNKNOWN", "not a blob or manifest path")
			return
		}
		unknown := "BLOB_UNKNOWN"
		if kind == "manifests" {
			unknown = "MANIFEST_UNKNOWN"
		}
		dgst, err := digest.Parse(ref)
		if err != nil {
			// A tag (or garbage): only the registry says what a tag is.
			writeError(w, http.StatusNotFound, unknown, "only content addressed by digest is served")
			return
		}
		var ra content.ReaderAt
		if kind != "blobs" {
			ra, err = store.Blob(r.Context(), dgst)
		} else {
			var fl *flight
			fl, ra, err = m.find(r, store, name, dgst)
			if fl != nil {
				serveFlight(w, r, peer, fl, unknown)
				return
			}
		}
		if err != nil {
			if !errdefs.IsNotFound(err) {
				log.WithError(err).WithField("digest", dgst).Warn("registry mirror: reading content")
			}
			writeError(w, http.StatusNotFound, unknown, "not on this node")
			return
		}
		defer ra.Close()
		body := io.NewSectionReader(ra, 0, ra.Size())
		ctype := "application/octet-stream"
		if kind == "manifests" {
			if mt := mediaType(body); mt != "" {
				ctype = mt
			}
		}
		log.WithFields(log.Fields{"peer": peer, "digest": dgst, "size": ra.Size()}).Debug("registry mirror: serving")
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Docker-Content-Digest", dgst.String())
		w.Header().Set("Etag", `"`+dgst.String()+`"`)
		// Ranges and HEAD as a registry answers them.
		http.ServeContent(w, r, "", time.Time{}, newBuffered(body))
	})
}

// readBuffer is how much of a blob one read from the store asks for:
// containerd's content store is read over gRPC, a call per read, and
// ServeContent reads 32 KiB at a time.
const readBuffer = 1 << 20

// buffered is a ReadSeeker over the store whose reads are readBuffer
// large.
type buffered struct {
	s  *io.SectionReader
	br *bufio.Reader
}

func newBuffered(s *io.SectionReader) *buffered {
	return &buffered{s: s, br: bufio.NewReaderSize(s, readBuffer)}
}

func (b *buffered) Read(p []byte) (int, error) { return b.br.Read(p) }

func (b *buffered) Seek(off int64, whence int) (int64, error) {
	n, err := b.s.Seek(off, whence)
	b.br.Reset(b.s)
	return n, err
}

// nodeOf is the node a request's verified client certificate names.
func nodeOf(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	subj := r.TLS.VerifiedChains[0][0].Subject
	name, ok := strings.CutPrefix(subj.CommonName, "system:node:")
	return name, ok && name != "" && slices.Contains(subj.Organization, "system:nodes")
}

// find is the blob dgst: in flight (acquired: the caller releases it) or
// committed in store. A request with the wait header, for a repository
// this node is pulling, waits up to ownerWait for the blob to start
// coming, woken by each flight that starts and each pull that ends (not
// polling); a node not pulling the repository says "not here" at once:
// the asker is not kept waiting for a blob that is not coming.
func (m *Mirror) find(r *http.Request, store Store, name string, dgst digest.Digest) (*flight, content.ReaderAt, error) {
	wait := r.Header.Get(waitHeader) != ""
	var timeout <-chan time.Time
	for {
		// changed is taken before the store is asked: a flight that
		// starts after this look is not missed.
		fl, pulling, changed := m.flights.lookup(dgst, name)
		if fl != nil {
			return fl, nil, nil
		}
		ra, err := store.Blob(r.Context(), dgst)
		if err == nil || !errdefs.IsNotFound(err) || !wait || !pulling {
			return nil, ra, err
		}
		if timeout == nil {
			t := m.clock.NewTimer(ownerWait)
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-changed:
		case <-timeout:
			wait = false // one last look
		case <-r.Context().Done():
			return nil, nil, r.Context().Err()
		}
	}
}

// serveFlight streams an acquired flight as it grows; a flight abandoned
// before its first byte is "not here" (the peer asks on, or the registry),
// one abandoned later is a cut response (the peer's copy fails its checks).
// Ranges are not served of a blob in flight: only whole blobs are asked
// for by peers.
func serveFlight(w http.ResponseWriter, r *http.Request, peer string, fl *flight, unknown string) {
	rd := fl.newReader(r.Context())
	defer rd.Close()
	if r.Header.Get("Range") != "" || (r.Method == http.MethodGet && !rd.ready()) {
		writeError(w, http.StatusNotFound, unknown, "not on this node yet")
		return
	}
	log.WithFields(log.Fields{"peer": peer, "digest": fl.dgst, "size": fl.size}).Debug("registry mirror: serving a blob in flight")
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Docker-Content-Digest", fl.dgst.String())
	h.Set("Etag", `"`+fl.dgst.String()+`"`)
	h.Set("Content-Length", strconv.FormatInt(fl.size, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, readBuffer)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			// The bytes go as they come, not when a buffer fills.
			_ = rc.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			if r.Context().Err() == nil {
				log.WithError(err).WithFields(log.Fields{"peer": peer, "digest": fl.dgst}).Debug("registry mirror: a blob in flight was abandoned while served")
			}
			// The response is cut, not ended: the peer sees a failure.
			panic(http.ErrAbortHandler)
		}
	}
}

// parsePath splits /v2/<name>/(blobs|manifests)/<reference>; the name may
// hold slashes.
func parsePath(p string) (kind, name, ref string, ok bool) {
	rest, ok := strings.CutPrefix(p, Prefix)
	if !ok {
		return "", "", "", false
	}
	for _, k := range []string{"blobs", "manifests"} {
		if i := strings.LastIndex(rest, "/"+k+"/"); i > 0 {
			ref = rest[i+len(k)+2:]
			if ref == "" || strings.Contains(ref, "/") {
				return "", "", "", false
			}
			return k, rest[:i], ref, true
		}
	}
	return "", "", "", false
}

// mediaType is a manifest's own mediaType field (OCI and Docker manifests
// and indexes carry it), what a registry answers as its Content-Type; body
// is left at its start.
func mediaType(body *io.SectionReader) string {
	defer body.Seek(0, io.SeekStart)
	if body.Size() > maxManifest {
		return ""
	}
	var m struct {
		MediaType string `json:"mediaType"`
	}
	if err := json.NewDecoder(body).Decode(&m); err != nil {
		return ""
	}
	return m.MediaType
}

// writeError answers as the distribution spec's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
