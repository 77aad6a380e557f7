package images

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func startRegistry(t *testing.T, auth *BasicAuth) *Registry {
	t.Helper()
	reg, err := StartRegistry("127.0.0.1:0", auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// pushAndPull pushes busybox and checks that a pull with creds returns the
// manifest that was built.
func pushAndPull(t *testing.T, reg *Registry, creds authn.Authenticator) {
	t.Helper()
	img := imageByRef(t, buildImages(t), BusyboxRef)
	ref, err := reg.Push(context.Background(), img, "library/busybox:1.35")
	if err != nil {
		t.Fatal(err)
	}
	if want := reg.Addr() + "/library/busybox:1.35"; ref != want {
		t.Fatalf("pushed ref %q, want %q", ref, want)
	}
	desc, _ := readLayout(t, img.Archive)

	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(r, remote.WithAuth(creds))
	if err != nil {
		t.Fatal(err)
	}
	d, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d != desc.Digest {
		t.Errorf("pulled digest %s, built %s", d, desc.Digest)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Cmd) != 1 || cf.Config.Cmd[0] != "sh" {
		t.Errorf("pulled config Cmd %q", cf.Config.Cmd)
	}
	layers, err := pulled.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed() // fetches the blob itself
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
}

func TestRegistryPushPull(t *testing.T) {
	reg := startRegistry(t, nil)
	pushAndPull(t, reg, authn.Anonymous)
}

func TestRegistryBasicAuth(t *testing.T) {
	auth := &BasicAuth{User: "alice", Password: "s3cret"}
	reg := startRegistry(t, auth)
	pushAndPull(t, reg, &authn.Basic{Username: auth.User, Password: auth.Password})

	for _, tc := range []struct {
		name       string
		user, pass string
	}{
		{"none", "", ""},
		{"wrong password", "alice", "nope"},
		{"wrong user", "bob", "s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v2/", "/v2/library/busybox/manifests/1.35"} {
				req, _ := http.NewRequest("GET", "http://"+reg.Addr()+path, nil)
				if tc.user != "" {
					req.SetBasicAuth(tc.user, tc.pass)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET %s: %d, want 401", path, resp.StatusCode)
				}
				if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="hostlet-test"` {
					t.Errorf("GET %s: WWW-Authenticate %q", path, got)
				}
			}

			creds := authn.Anonymous
			if tc.user != "" {
				creds = &authn.Basic{Username: tc.user, Password: tc.pass}
			}
			r, _ := name.ParseReference(reg.Addr()+"/library/busybox:1.35", name.Insecure)
			_, err := remote.Image(r, remote.WithAuth(creds))
			var terr *transport.Error
			if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
				t.Errorf("pull: %v, want a 401", err)
			}
		})
	}
}

func TestRegistryPushBadRef(t *testing.T) {
	reg := startRegistry(t, nil)
	img := imageByRef(t, buildImages(t), BusyboxRef)
	if _, err := reg.Push(context.Background(), img, "UPPER/case:1"); err == nil {
		t.Errorf("push to invalid repo: %v", err)
	}
}
