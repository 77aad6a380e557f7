package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
)

// authWith is the kubelet API's auth filter of mode over a handler that
// answers "ok", with a TokenReview that knows the token "t1" as "tok" and
// SubjectAccessReviews that allow nothing.
func authWith(t *testing.T, mode AuthMode) func(token string) (int, string) {
	t.Helper()
	cert, _, err := certutil.GenerateSelfSignedCertKey("ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, cert, 0o644); err != nil {
		t.Fatal(err)
	}
	// An API server answering the reviews (the webhooks post them through
	// the clients' REST clients).
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			if tr.Spec.Token == "t1" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "tok"}}
			}
			_ = json.NewEncoder(w).Encode(tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&sar)
			_ = json.NewEncoder(w).Encode(sar) // not allowed
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	auth, err := newKubeletAuth(ctx, client, caFile, AuthCache{}, mode)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return func(token string) (int, string) {
		r := httptest.NewRequest("GET", "/containerLogs/ns/p/c", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		withKubeletAuth(auth, "n1", ok).ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
}

// The kubelet's authentication and authorization modes: anonymous
// requests refused unless authentication.anonymous.enabled, then
// system:anonymous's; bearer tokens reviewed unless
// authentication.webhook.enabled is false; AlwaysAllow allows whoever
// authenticated.
func TestAuthModes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		mode           AuthMode
		token          string
		code           int
		body, warnings string
	}{
		{"defaults, anonymous", AuthMode{}, "", 401, "Unauthorized", ""},
		{"defaults, reviewed token, no access", AuthMode{}, "t1", 403, "Forbidden (user=tok, verb=get, resource=nodes, subresource(s)=[proxy])\n", ""},
		{"defaults, unknown token", AuthMode{}, "nope", 401, "Unauthorized", ""},
		{"anonymous", AuthMode{Anonymous: true}, "", 403, "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[proxy])\n", "anonymous"},
		{"always allow, token", AuthMode{AlwaysAllow: true}, "t1", 200, "ok", "AlwaysAllow"},
		{"always allow, anonymous refused", AuthMode{AlwaysAllow: true}, "", 401, "Unauthorized", "AlwaysAllow"},
		{"always allow and anonymous", AuthMode{AlwaysAllow: true, Anonymous: true}, "", 200, "ok", "anyone"},
		{"no token review", AuthMode{NoTokenReview: true, AlwaysAllow: true}, "t1", 401, "Unauthorized", "AlwaysAllow"},
		{"no token review, anonymous", AuthMode{NoTokenReview: true, Anonymous: true, AlwaysAllow: true}, "t1", 200, "ok", "anyone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := authWith(t, tc.mode)(tc.token)
			if code != tc.code || body != tc.body {
				t.Errorf("%d %q, want %d %q", code, body, tc.code, tc.body)
			}
			w := strings.Join(tc.mode.Warnings(), "\n")
			if (tc.warnings == "") != (w == "") || !strings.Contains(w, tc.warnings) || (w != "" && !strings.Contains(w, "insecure")) {
				t.Errorf("warnings %q, want one saying %q (insecure)", w, tc.warnings)
			}
		})
	}
}

// authorization.mode as the kubelet's BuildAuthz takes it.
func TestParseAuthorizationMode(t *testing.T) {
	if a, err := ParseAuthorizationMode("AlwaysAllow"); !a || err != nil {
		t.Errorf("AlwaysAllow: %v %v", a, err)
	}
	if a, err := ParseAuthorizationMode("Webhook"); a || err != nil {
		t.Errorf("Webhook: %v %v", a, err)
	}
	if _, err := ParseAuthorizationMode("RBAC"); err == nil || err.Error() != "unknown authorization mode RBAC" {
		t.Errorf("RBAC: %v", err)
	}
	if _, err := ParseAuthorizationMode(""); err == nil || err.Error() != "no authorization mode specified" {
		t.Errorf("empty: %v", err)
	}
}

// enableDebuggingHandlers: false: the kubelet's debugging paths answer 405
// "Debug endpoints are disabled.", /configz is not served, /pods, health,
// stats and metrics are.
func TestDebuggingDisabled(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(&v1.Pod{})
	s := &server{cfg: Config{APIPods: corelisters.NewPodLister(idx), Configz: struct{}{}, Profiling: true, SystemLogs: true, DebuggingDisabled: true}}
	mux := http.NewServeMux()
	s.readOnlyRoutes().install(mux)
	s.installDebuggingDisabled(mux)
	get := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	for _, p := range []string{"/run/ns/p/c", "/exec/ns/p/c", "/exec/ns/p/uid/c", "/attach/ns/p/c", "/portForward/ns/p", "/containerLogs/ns/p/c",
		"/runningpods/", "/debug/pprof/profile", "/logs/", "/logs/syslog"} {
		for _, m := range []string{"GET", "POST"} {
			if code, body := get(m, p); code != http.StatusMethodNotAllowed || body != "Debug endpoints are disabled.\n" {
				t.Errorf("%s %s: %d %q, want 405 'Debug endpoints are disabled.'", m, p, code, body)
			}
		}
	}
	if code, _ := get("GET", "/configz"); code != http.StatusNotFound {
		t.Errorf("/configz: %d, want 404", code)
	}
	if code, body := get("GET", "/pods"); code != 200 || !strings.Contains(body, `"kind":"PodList"`) {
		t.Errorf("/pods: %d %q", code, body)
	}
	if code, _ := get("GET", "/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
}
