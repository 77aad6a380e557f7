package images

import (
	"archive/tar"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// AuthRealm is the realm of the basic auth challenge.
const AuthRealm = "hostlet-test"

// BasicAuth is the user a Registry accepts (and Also, further ones).
type BasicAuth struct {
	User, Password string
	Also           []BasicAuth
}

// Registry is an in-memory OCI distribution registry on loopback, spoken to
// over plain HTTP.
type Registry struct {
	ln    net.Listener
	srv   *http.Server
	auth  *BasicAuth
	blobs blobLog
}

// StartRegistry serves a fresh, empty registry on addr (e.g. "127.0.0.1:0").
// With auth set, every request must carry those basic credentials; others
// get 401 and a Basic challenge, which containerd's resolver answers.
func StartRegistry(addr string, auth *BasicAuth) (*Registry, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Registry{ln: ln, auth: auth}
	h := r.countBlobs(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	if auth != nil {
		h = requireBasicAuth(h, *auth)
	}
	r.srv = &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func requireBasicAuth(next http.Handler, want BasicAuth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		match := func(a BasicAuth) bool {
			return subtle.ConstantTimeCompare([]byte(user), []byte(a.User)) == 1 &&
				subtle.ConstantTimeCompare([]byte(pass), []byte(a.Password)) == 1
		}
		if ok && !match(want) {
			ok = slices.ContainsFunc(want.Also, match)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+AuthRealm+`"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// Addr is the host:port the registry listens on.
func (r *Registry) Addr() string { return r.ln.Addr().String() }

// Close stops serving; the stored images are gone.
func (r *Registry) Close() error { return r.srv.Close() }

// Push uploads img under repoTag (e.g. "busybox:1.35"; the tag is required)
// and returns the full ref to pull, Addr()+"/"+repoTag.
func (r *Registry) Push(ctx context.Context, img Image, repoTag string) (string, error) {
	ref, err := name.ParseReference(r.Addr()+"/"+repoTag, name.Insecure, name.StrictValidation)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "hostlet-push-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := untar(img.Archive, dir); err != nil {
		return "", fmt.Errorf("unpack %s: %w", img.Archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(im.Manifests) != 1 {
		return "", fmt.Errorf("%s: want one manifest, found %d", img.Archive, len(im.Manifests))
	}
	image, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if r.auth != nil {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.auth.User, Password: r.auth.Password}))
	}
	if err := remote.Write(ref, image, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}

// untar extracts the directories and regular files of an archive made by
// writeArchive into dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		p := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFrom(p, tr)
		default:
			err = fmt.Errorf("unexpected entry %q", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
