package mirror

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/utils/clock"
)

// contentStore is a Store over a containerd content store, as the runtime's.
type contentStore struct{ content.Store }

func (s contentStore) Blob(ctx context.Context, dgst digest.Digest) (content.ReaderAt, error) {
	return s.ReaderAt(ctx, ocispec.Descriptor{Digest: dgst})
}

func newStore(t *testing.T) content.Store {
	t.Helper()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// put commits data to cs and returns its descriptor.
func put(t *testing.T, cs content.Store, mediaType string, data []byte) ocispec.Descriptor {
	t.Helper()
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := content.WriteBlob(context.Background(), cs, "put-"+desc.Digest.String(), strings.NewReader(string(data)), desc); err != nil {
		t.Fatal(err)
	}
	return desc
}

// peerServer serves the mirror of cs over TLS as a node's kubelet API.
func peerServer(t *testing.T, p *testPKI, name string, h http.Handler) *httptest.Server {
	t.Helper()
	return newTLSServer(t, p.serverTLS(p.issue(t, "system:node:"+name, []string{"system:nodes"}, true)), h)
}

func newTLSServer(t *testing.T, cfg *tls.Config, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestHandler(t *testing.T) {
	p := newTestPKI(t)
	cs := newStore(t)
	blob := put(t, cs, ocispec.MediaTypeImageLayerGzip, []byte("layer bytes"))
	manifest := put(t, cs, ocispec.MediaTypeImageManifest, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`))
	srv := peerServer(t, p, "a", storeHandler(t, contentStore{cs}))

	node := p.issue(t, "system:node:b", []string{"system:nodes"}, false)
	user := p.issue(t, "alice", []string{"system:masters"}, false)
	client := func(cert *tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientTLS(cert)}}
	}
	do := func(c *http.Client, method, path string, hdr ...string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	nodeC := client(&node)
	blobPath := "/v2/library/app/blobs/" + blob.Digest.String()

	for _, tc := range []struct {
		name       string
		c          *http.Client
		method     string
		path       string
		hdr        []string
		wantStatus int
		wantBody   string
		wantType   string
	}{
		{"a blob by digest", nodeC, "GET", blobPath, nil, 200, "layer bytes", "application/octet-stream"},
		{"a blob under a nested name", nodeC, "GET", "/v2/a/b/c/blobs/" + blob.Digest.String(), nil, 200, "layer bytes", ""},
		{"HEAD", nodeC, "HEAD", blobPath, nil, 200, "", ""},
		{"a range", nodeC, "GET", blobPath, []string{"Range", "bytes=6-"}, 206, "bytes", ""},
		{"a manifest by digest, with its media type", nodeC, "GET", "/v2/library/app/manifests/" + manifest.Digest.String(), nil, 200, "", ocispec.MediaTypeImageManifest},
		{"a manifest by tag", nodeC, "GET", "/v2/library/app/manifests/latest", nil, 404, "MANIFEST_UNKNOWN", ""},
		{"a blob not on the node", nodeC, "GET", "/v2/library/app/blobs/" + digest.FromString("other").String(), nil, 404, "BLOB_UNKNOWN", ""},
		{"a bad digest", nodeC, "GET", "/v2/library/app/blobs/sha256:abc", nil, 404, "BLOB_UNKNOWN", ""},
		{"an upload", nodeC, "POST", "/v2/library/app/blobs/uploads/", nil, 405, "UNSUPPORTED", ""},
		{"a delete", nodeC, "DELETE", blobPath, nil, 405, "UNSUPPORTED", ""},
		{"the API root", nodeC, "GET", "/v2/", nil, 200, "{}", ""},
		{"not a node", client(&user), "GET", blobPath, nil, 403, "DENIED", ""},
		{"no client certificate", client(nil), "GET", blobPath, nil, 401, "UNAUTHORIZED", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := do(tc.c, tc.method, tc.path, tc.hdr...)
			if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
				t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, status, body, tc.wantStatus, tc.wantBody)
			}
			if tc.wantType != "" && hdr.Get("Content-Type") != tc.wantType {
				t.Errorf("Content-Type %q, want %q", hdr.Get("Content-Type"), tc.wantType)
			}
			if status == 200 && strings.Contains(tc.path, "/blobs/") && hdr.Get("Docker-Content-Digest") != blob.Digest.String() {
				t.Errorf("Docker-Content-Digest %q", hdr.Get("Docker-Content-Digest"))
			}
		})
	}

	// A certificate from another CA is no node of this cluster.
	other := newTestPKI(t)
	stranger := other.issue(t, "system:node:x", []string{"system:nodes"}, false)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{stranger}}}}
	if resp, err := c.Get(srv.URL + blobPath); err == nil {
		resp.Body.Close()
		t.Errorf("a node certificate of another CA: %s, want the handshake refused", resp.Status)
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct{ path, kind, ref string }{
		{"/v2/busybox/blobs/sha256:1", "blobs", "sha256:1"},
		{"/v2/a/b/manifests/sha256:2", "manifests", "sha256:2"},
		{"/v2/blobs/blobs/sha256:3", "blobs", "sha256:3"},
		{"/v2/x/blobs/", "", ""},
		{"/v2/x/blobs/uploads/1", "", ""},
		{"/v2/x/tags/list", "", ""},
		{"/pods", "", ""},
	} {
		kind, _, ref, ok := parsePath(tc.path)
		if kind != tc.kind || ref != tc.ref || ok != (tc.kind != "") {
			t.Errorf("parsePath(%q) = %q %q %v, want %q %q", tc.path, kind, ref, ok, tc.kind, tc.ref)
		}
	}
}

// storeHandler is a mirror's handler of store with no pull of its own.
func storeHandler(t *testing.T, store Store) http.Handler {
	return (&Mirror{flights: newFlights(t.TempDir()), clock: clock.RealClock{}}).Handler(store)
}
