package images

import (
	"net/http"
	"strings"
	"sync"
)

// blobLog counts what a Registry served of each blob: the requests (with
// their Range headers) and the bytes of their bodies, so a test sees
// whether a client fetched a blob whole or only ranges of it (lazy pulls).
type blobLog struct {
	mu sync.Mutex
	m  map[string]*BlobStats
}

// BlobStats is what a Registry served of one blob.
type BlobStats struct {
	// Requests are the GETs, each as its Range header ("" for the whole).
	Requests []string
	// Bytes is the body bytes sent, over all GETs.
	Bytes int64
}

// Blob returns what the registry served of the blob digest ("sha256:...")
// so far, to any repository.
func (r *Registry) Blob(digest string) BlobStats {
	r.blobs.mu.Lock()
	defer r.blobs.mu.Unlock()
	s := r.blobs.m[digest]
	if s == nil {
		return BlobStats{}
	}
	return BlobStats{Requests: append([]string(nil), s.Requests...), Bytes: s.Bytes}
}

func (r *Registry) countBlobs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, digest, ok := strings.Cut(req.URL.Path, "/blobs/")
		if !ok || req.Method != http.MethodGet || !strings.HasPrefix(digest, "sha256:") {
			next.ServeHTTP(w, req)
			return
		}
		cw := &countingWriter{ResponseWriter: w}
		next.ServeHTTP(cw, req)
		r.blobs.mu.Lock()
		defer r.blobs.mu.Unlock()
		if r.blobs.m == nil {
			r.blobs.m = map[string]*BlobStats{}
		}
		s := r.blobs.m[digest]
		if s == nil {
			s = &BlobStats{}
			r.blobs.m[digest] = s
		}
		s.Requests = append(s.Requests, req.Header.Get("Range"))
		s.Bytes += cw.n
	})
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}
