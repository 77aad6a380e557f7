package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestRequestAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		verb         string
		subs         []string
	}{
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/podsx", "get", []string{"proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/stats", "get", []string{"stats"}},
		{"GET", "/metrics/cadvisor", "get", []string{"metrics"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/logs/", "get", []string{"log"}},
		{"GET", "/logsx", "get", []string{"proxy"}},
		{"POST", "/checkpoint/ns/p/c", "create", []string{"checkpoint"}},
		{"GET", "/statusz", "get", []string{"statusz"}},
		{"GET", "/flagz", "get", []string{"configz"}},
		{"GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"GET", "/debug/pprof/profile", "get", []string{"proxy"}},
		{"POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"GET", "/exec/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/portForward/ns/p", "create", []string{"proxy"}},
		{"PUT", "/x", "update", []string{"proxy"}},
		{"PATCH", "/x", "patch", []string{"proxy"}},
		{"DELETE", "/x", "delete", []string{"proxy"}},
		{"HEAD", "/x", "", []string{"proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		attrs := requestAttributes(&user.DefaultInfo{Name: "u"}, r, "n1")
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.GetSubresource())
			if a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "n1" || !a.IsResourceRequest() || a.GetAPIVersion() != "v1" {
				t.Errorf("%s %s: attrs %+v", tc.method, tc.path, a)
			}
		}
		if strings.Join(subs, ",") != strings.Join(tc.subs, ",") {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, subs, tc.subs)
		}
	}
}

type fakeAuth struct {
	user    string
	allowed map[string]bool // verb/subresource
}

func (f fakeAuth) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if f.user == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: f.user}}, true, nil
}

func (f fakeAuth) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if f.allowed[a.GetVerb()+"/"+a.GetSubresource()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func TestKubeletAuthFilter(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	serve := func(a fakeAuth, method, path string) (int, string) {
		rec := httptest.NewRecorder()
		withKubeletAuth(a, "n1", ok).ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := serve(fakeAuth{}, "GET", "/pods"); code != 401 || body != "Unauthorized" {
		t.Errorf("anonymous: %d %q", code, body)
	}
	podsOnly := fakeAuth{user: "alice", allowed: map[string]bool{"get/pods": true}}
	if code, _ := serve(podsOnly, "GET", "/pods"); code != 200 {
		t.Errorf("nodes/pods on /pods: %d", code)
	}
	code, body := serve(podsOnly, "GET", "/containerLogs/ns/p/c")
	if want := "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])\n"; code != 403 || body != want {
		t.Errorf("nodes/pods on containerLogs: %d %q, want 403 %q", code, body, want)
	}
	code, body = serve(fakeAuth{user: "bob"}, "GET", "/healthz")
	if want := "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[healthz proxy])\n"; code != 403 || body != want {
		t.Errorf("nothing on healthz: %d %q, want 403 %q", code, body, want)
	}
	proxy := fakeAuth{user: "p", allowed: map[string]bool{"get/proxy": true, "create/proxy": true}}
	for _, path := range []string{"/pods", "/healthz", "/containerLogs/ns/p/c"} {
		if code, _ := serve(proxy, "GET", path); code != 200 {
			t.Errorf("nodes/proxy on %s: %d", path, code)
		}
	}
	if code, _ := serve(proxy, "GET", "/stats/summary"); code != 403 {
		t.Errorf("nodes/proxy on stats: %d", code)
	}
}

// The registry mirror's paths reach the mirror (which checks the caller's
// node certificate itself), without the kubelet's authorization; the rest
// still goes through it.
func TestMirrorRoutes(t *testing.T) {
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(name)) })
	}
	h := withMirror(tag("mirror"), withKubeletAuth(fakeAuth{}, "n1", tag("kubelet")))
	for path, want := range map[string]string{
		"/v2":                          "mirror",
		"/v2/":                         "mirror",
		"/v2/library/x/blobs/sha256:1": "mirror",
		"/v2x":                         "Unauthorized",
		"/pods":                        "Unauthorized",
		"/stats/summary":               "Unauthorized",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Body.String() != want {
			t.Errorf("%s: %q, want %q", path, rec.Body.String(), want)
		}
	}
}
