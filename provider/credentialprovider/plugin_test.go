package credentialprovider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

type fakePlugin struct {
	mu    sync.Mutex
	calls []*credentialproviderapi.CredentialProviderRequest
	resp  func(req *credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error)
}

func (f *fakePlugin) exec(_ context.Context, req *credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	return f.resp(req)
}

func (f *fakePlugin) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func answer(keyType credentialproviderapi.PluginCacheKeyType, ttl *time.Duration) func(*credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
	return func(req *credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
		r := &credentialproviderapi.CredentialProviderResponse{CacheKeyType: keyType,
			Auth: map[string]credentialproviderapi.AuthConfig{"*.example.com": {Username: "u", Password: "p"}}}
		if ttl != nil {
			r.CacheDuration = &metav1.Duration{Duration: *ttl}
		}
		return r, nil
	}
}

func newTestProviders(f *fakePlugin, clk *clocktesting.FakeClock, defaultTTL time.Duration) *Providers {
	return &Providers{plugins: []*provider{{
		name: "fake", clock: clk, matchImages: []string{"*.example.com"},
		defaultCacheDuration: defaultTTL, plugin: f, cache: map[string]cacheEntry{}, lastPurge: clk.Now(),
	}}}
}

// The cache as the kubelet's: keyed by image, registry or globally as the
// plugin says, for its cacheDuration, else defaultCacheDuration; 0 caches
// nothing; images matchImages does not cover never reach the plugin.
func TestProviderCache(t *testing.T) {
	ctx := context.Background()
	minute := time.Minute
	zero := time.Duration(0)
	for _, c := range []struct {
		name       string
		keyType    credentialproviderapi.PluginCacheKeyType
		ttl        *time.Duration
		defaultTTL time.Duration
		// calls after: a, a again, b (same registry), c (other registry),
		// a after 2 minutes.
		want []int
	}{
		{"image", credentialproviderapi.ImagePluginCacheKeyType, &minute, 0, []int{1, 1, 2, 3, 4}},
		{"registry", credentialproviderapi.RegistryPluginCacheKeyType, &minute, 0, []int{1, 1, 1, 2, 3}},
		{"global", credentialproviderapi.GlobalPluginCacheKeyType, &minute, 0, []int{1, 1, 1, 1, 2}},
		{"default duration", credentialproviderapi.GlobalPluginCacheKeyType, nil, 5 * time.Minute, []int{1, 1, 1, 1, 1}},
		{"no default", credentialproviderapi.GlobalPluginCacheKeyType, nil, 0, []int{1, 2, 3, 4, 5}},
		{"zero duration", credentialproviderapi.GlobalPluginCacheKeyType, &zero, 5 * time.Minute, []int{1, 2, 3, 4, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			f := &fakePlugin{resp: answer(c.keyType, c.ttl)}
			ps := newTestProviders(f, clk, c.defaultTTL)
			steps := []string{"a.example.com/x", "a.example.com/x", "a.example.com/y", "b.example.com/x", "a.example.com/x"}
			for i, img := range steps {
				if i == 4 {
					clk.Step(2 * time.Minute)
				}
				got := ps.Lookup(ctx, img, Pod{})
				if len(got) != 1 || got[0] != (AuthConfig{Username: "u", Password: "p"}) {
					t.Fatalf("step %d: credentials %v", i, got)
				}
				if f.count() != c.want[i] {
					t.Fatalf("step %d (%s): %d plugin calls, want %d", i, img, f.count(), c.want[i])
				}
			}
			if got := ps.Lookup(ctx, "other.io/x", Pod{}); got != nil || f.count() != c.want[4] {
				t.Errorf("unmatched image: %v, %d calls", got, f.count())
			}
		})
	}
}

// A failing plugin gives no credentials (the pull goes on without) and is
// asked again next time; a bad cacheKeyType is a failure.
func TestProviderFailure(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := &fakePlugin{resp: func(*credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
		return nil, fmt.Errorf("boom")
	}}
	ps := newTestProviders(f, clk, time.Hour)
	for i := 0; i < 2; i++ {
		if got := ps.Lookup(context.Background(), "a.example.com/x", Pod{}); got != nil {
			t.Fatalf("credentials %v", got)
		}
	}
	if f.count() != 2 {
		t.Errorf("%d calls, want 2", f.count())
	}
	f.resp = answer("Bogus", nil)
	if _, err := ps.plugins[0].provide(context.Background(), "a.example.com/x", Pod{}); err == nil ||
		!strings.Contains(err.Error(), "did not return a valid cacheKeyType: Bogus") {
		t.Errorf("error %v", err)
	}
}

type fakeSAs struct {
	sa     *v1.ServiceAccount
	tokens int
	clock  *clocktesting.FakeClock
}

func (f *fakeSAs) ServiceAccount(_ context.Context, ns, name string) (*v1.ServiceAccount, error) {
	if f.sa == nil || f.sa.Name != name {
		return nil, fmt.Errorf("serviceaccount %q not found", name)
	}
	return f.sa, nil
}

func (f *fakeSAs) CreateToken(_ context.Context, ns, name string, req *authv1.TokenRequest) (*authv1.TokenRequest, error) {
	f.tokens++
	if len(req.Spec.Audiences) != 1 || req.Spec.Audiences[0] != "registry" || req.Spec.BoundObjectRef.Name != "p" || req.UID != f.sa.UID {
		return nil, fmt.Errorf("unexpected request %+v", req)
	}
	out := req.DeepCopy()
	out.Spec.ExpirationSeconds = ptr.To[int64](3600)
	out.Status = authv1.TokenRequestStatus{Token: fmt.Sprintf("token-%d", f.tokens), ExpirationTimestamp: metav1.NewTime(f.clock.Now().Add(time.Hour))}
	return out, nil
}

// Service account token mode: the plugin gets a token of the pod's
// service account and its required and optional annotations; a missing
// required annotation or service account skips the plugin; the cache is
// per service account (cacheType ServiceAccount) or per token (Token).
func TestProviderServiceAccountTokens(t *testing.T) {
	ctx := context.Background()
	for _, cacheType := range []string{cacheTypeServiceAccount, cacheTypeToken} {
		t.Run(cacheType, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			f := &fakePlugin{resp: answer(credentialproviderapi.ImagePluginCacheKeyType, nil)}
			sas := &fakeSAs{clock: clk, sa: &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", UID: "sa-uid",
				Annotations: map[string]string{"example.com/role": "r", "example.com/opt": "o", "other": "x"}}}}
			ps := newTestProviders(f, clk, time.Hour)
			ps.plugins[0].sa = &saProvider{audience: "registry", require: true, required: []string{"example.com/role"},
				optional: []string{"example.com/opt", "example.com/absent"}, cacheType: cacheType, api: sas, clock: clk}
			pod := Pod{Namespace: "ns", Name: "p", UID: "pod-uid", ServiceAccountName: "puller"}
			got := ps.Lookup(ctx, "a.example.com/x", pod)
			if len(got) != 1 {
				t.Fatalf("credentials %v", got)
			}
			// The service account's, for the image's pull record.
			if s := got[0].Source; s == nil || s.ServiceAccount == nil || *s.ServiceAccount != (Coordinates{UID: "sa-uid", Namespace: "ns", Name: "puller"}) {
				t.Errorf("source %+v, want the service account ns/puller", s)
			}
			req := f.calls[0]
			if req.ServiceAccountToken != "token-1" || len(req.ServiceAccountAnnotations) != 2 ||
				req.ServiceAccountAnnotations["example.com/role"] != "r" || req.ServiceAccountAnnotations["example.com/opt"] != "o" {
				t.Errorf("request %+v", req)
			}
			ps.Lookup(ctx, "a.example.com/x", pod)
			if f.count() != 1 || sas.tokens != 1 {
				t.Errorf("%d calls, %d tokens: want the token and the answer reused", f.count(), sas.tokens)
			}
			// Past 80% of the token's hour: a new token.
			clk.Step(49 * time.Minute)
			ps.Lookup(ctx, "a.example.com/x", pod)
			want := 1 // the same service account: cached
			if cacheType == cacheTypeToken {
				want = 2 // a new token: a new key
			}
			if f.count() != want || sas.tokens != 2 {
				t.Errorf("%d calls, %d tokens, want %d calls, 2 tokens", f.count(), sas.tokens, want)
			}
			// No service account while one is required; a missing one.
			ps.Lookup(ctx, "a.example.com/x", Pod{Namespace: "ns", Name: "p"})
			ps.Lookup(ctx, "a.example.com/x", Pod{Namespace: "ns", Name: "p", ServiceAccountName: "absent"})
			delete(sas.sa.Annotations, "example.com/role")
			ps.Lookup(ctx, "a.example.com/x", pod)
			if f.count() != want {
				t.Errorf("%d calls, want %d", f.count(), want)
			}
		})
	}
}

func writeExec(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// The exec protocol end to end: the request on stdin, args and env from
// the configuration; a failing plugin's stderr in the error; a hanging one
// (and the child holding its stdout) killed at the timeout.
func TestExecPlugin(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: echo
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["*.example.com"]
  defaultCacheDuration: 1m
  args: ["--user", "alice"]
  env: [{name: PASS, value: secret}]
- name: fail
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["fail.example.com"]
  defaultCacheDuration: 1m
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The request is saved to prove it came on stdin.
	writeExec(t, dir, "echo", `cat > "$0.req"
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"*.example.com":{"username":"%s","password":"%s"}}}' "$2" "$PASS"
`)
	writeExec(t, dir, "fail", "echo 'no credentials today' >&2\nexit 3\n")
	ps, err := New(Config{ConfigPath: cfgPath, BinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got := ps.Lookup(context.Background(), "a.example.com/app", Pod{})
	if len(got) != 1 || got[0] != (AuthConfig{Username: "alice", Password: "secret"}) {
		t.Errorf("credentials %v", got)
	}
	req, _ := os.ReadFile(filepath.Join(dir, "echo.req"))
	if !strings.Contains(string(req), `"kind":"CredentialProviderRequest"`) || !strings.Contains(string(req), `"image":"a.example.com/app"`) {
		t.Errorf("request %s", req)
	}
	_, err = ps.plugins[1].provide(context.Background(), "fail.example.com/app", Pod{})
	if err == nil || !strings.Contains(err.Error(), "error execing credential provider plugin fail for image fail.example.com/app: exit status 3: no credentials today") {
		t.Errorf("error %v", err)
	}

	if n := testutil.ToFloat64(pluginErrors.WithLabelValues("fail")); n != 1 {
		t.Errorf("errors of fail: %v, want 1", n)
	}
	if n := testutil.CollectAndCount(pluginDuration, "kubelet_credential_provider_plugin_duration"); n != 2 {
		t.Errorf("duration series: %d, want 2 (echo, fail)", n)
	}
	if !strings.HasPrefix(ps.configHash, "sha256:") || len(ps.configHash) != len("sha256:")+64 {
		t.Errorf("config hash %q", ps.configHash)
	}
	writeExec(t, dir, "hang", "sleep 600 &\nsleep 600\n")
	e := &execPlugin{name: "hang", apiVersion: "credentialprovider.kubelet.k8s.io/v1", binDir: dir,
		encoder: ps.plugins[0].plugin.(*execPlugin).encoder, timeout: 200 * time.Millisecond}
	_, err = e.exec(context.Background(), &credentialproviderapi.CredentialProviderRequest{Image: "x"})
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("hanging plugin: %v", err)
	}
}

// Configuration errors as the kubelet's, and a directory of files merged.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const head = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"
	confs := filepath.Join(dir, "d")
	_ = os.Mkdir(confs, 0o755)
	write("d/20-b.yaml", head+"providers:\n- {name: b, apiVersion: credentialprovider.kubelet.k8s.io/v1, matchImages: [b.io], defaultCacheDuration: 1m}\n")
	write("d/10-a.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"CredentialProviderConfig","providers":[{"name":"a","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","matchImages":["a.io"],"defaultCacheDuration":"1m"}]}`)
	write("d/ignored.txt", "junk")
	cfg, err := ReadConfig(confs)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 2 || cfg.Providers[0].Name != "a" || cfg.Providers[1].Name != "b" {
		t.Errorf("merged %+v", cfg.Providers)
	}
	write("d/30-dup.yml", head+"providers:\n- {name: a, apiVersion: credentialprovider.kubelet.k8s.io/v1, matchImages: [b.io], defaultCacheDuration: 1m}\n")
	if _, err := ReadConfig(confs); err == nil || !strings.Contains(err.Error(), `duplicate provider name "a"`) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := ReadConfig(write("unknown.yaml", head+"providers: []\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := ReadConfig(write("kind.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n")); err == nil || !strings.Contains(err.Error(), "wrong Kind") {
		t.Errorf("wrong kind: %v", err)
	}
	bad, err := ReadConfig(write("bad.yaml", head+`providers:
- name: a/b
  apiVersion: credentialprovider.kubelet.k8s.io/v2
  matchImages: []
- name: t
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [x.io]
  defaultCacheDuration: -1m
  tokenAttributes:
    serviceAccountTokenAudience: ""
    cacheType: Weekly
    requireServiceAccount: false
    requiredServiceAccountAnnotationKeys: [k]
`))
	if err != nil {
		t.Fatal(err)
	}
	errs := ValidateConfig(bad, false).ToAggregate().Error()
	for _, want := range []string{
		`providers.name: Invalid value: "a/b": provider name cannot contain '/'`,
		`providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v2"`,
		`providers.matchImages: Required value: at least 1 item in matchImages is required`,
		`providers.defaultCacheDuration: Required value`,
		`providers.defaultCacheDuration: Invalid value`,
		`providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled`,
		`providers.tokenAttributes.serviceAccountTokenAudience: Required value`,
		`providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set`,
		`providers.tokenAttributes.cacheType: Unsupported value: "Weekly"`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("validation errors lack %q:\n%s", want, errs)
		}
	}
}
