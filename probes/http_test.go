package probes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// serve starts a local HTTP server and returns the target and action that
// probe path on it.
func serve(t *testing.T, h http.HandlerFunc) (Target, *v1.HTTPGetAction) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	p, _ := strconv.Atoi(port)
	return Target{PodIP: host, Container: &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(p)}}}},
		&v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("web")}
}

func httpProbe(t *testing.T, target Target, g *v1.HTTPGetAction, timeout time.Duration) (Result, string) {
	t.Helper()
	return NewProber().Probe(context.Background(), &v1.ProbeHandler{HTTPGet: g}, target, timeout)
}

// 2xx is success with the body as output, 3xx that is not followed a
// warning, anything else a failure that does not show the body.
func TestHTTPStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		code int
		want Result
		out  string
	}{
		{200, Success, "body"},
		{204, Success, ""},
		{302, Warning, "Probe terminated redirects, Response body: body"},
		{404, Failure, "HTTP probe failed with statuscode: 404"},
		{500, Failure, "HTTP probe failed with statuscode: 500"},
	} {
		target, g := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if tc.code == 302 {
				w.Header().Set("Location", "http://192.0.2.1/elsewhere")
			}
			w.WriteHeader(tc.code)
			if tc.code != 204 {
				fmt.Fprint(w, "body")
			}
		})
		r, out := httpProbe(t, target, g, time.Second)
		if r != tc.want || out != tc.out {
			t.Errorf("%d: got %v %q, want %v %q", tc.code, r, out, tc.want, tc.out)
		}
	}
}

// Redirects on the same host are followed; to another host they end the
// probe with a warning (not followed).
func TestHTTPRedirects(t *testing.T) {
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/ok":
			fmt.Fprint(w, "landed")
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	if r, out := httpProbe(t, target, g, time.Second); r != Success || out != "landed" {
		t.Errorf("same-host redirect: %v %q", r, out)
	}
	g.Path = "/loop"
	if r, out := httpProbe(t, target, g, time.Second); r != Failure || !strings.Contains(out, "stopped after 10 redirects") {
		t.Errorf("redirect loop: %v %q", r, out)
	}
}

// The request carries the kubelet's User-Agent and Accept unless the probe
// sets them, its own headers, the Host header as the host, and the query.
func TestHTTPHeaders(t *testing.T) {
	got := make(chan *http.Request, 1)
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) { got <- r })
	g.Path = "/healthz?x=1"
	if r, out := httpProbe(t, target, g, time.Second); r != Success {
		t.Fatalf("%v %q", r, out)
	}
	req := <-got
	if req.UserAgent() != "kube-probe/1.35" || req.Header.Get("Accept") != "*/*" || req.URL.RawQuery != "x=1" {
		t.Errorf("default request: UA %q Accept %q query %q", req.UserAgent(), req.Header.Get("Accept"), req.URL.RawQuery)
	}
	g.HTTPHeaders = []v1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: ""}, {Name: "Host", Value: "example.test"}, {Name: "X-A", Value: "1"}, {Name: "X-A", Value: "2"}}
	httpProbe(t, target, g, time.Second)
	req = <-got
	if req.UserAgent() != "mine" || req.Header["Accept"] != nil || req.Host != "example.test" || strings.Join(req.Header.Values("X-A"), ",") != "1,2" {
		t.Errorf("custom request: UA %q Accept %v Host %q X-A %v", req.UserAgent(), req.Header["Accept"], req.Host, req.Header.Values("X-A"))
	}
}

// Only the first 10 KiB of a body are read, as the kubelet does.
func TestHTTPBodyLimit(t *testing.T) {
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", 64*1024))
	})
	if r, out := httpProbe(t, target, g, time.Second); r != Success || len(out) != 10*1024 {
		t.Errorf("got %v with %d bytes, want success with 10240", r, len(out))
	}
}

// A server slower than the timeout fails the probe.
func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	if r, out := httpProbe(t, target, g, 50*time.Millisecond); r != Failure || !strings.Contains(out, "deadline exceeded") {
		t.Errorf("got %v %q", r, out)
	}
}

// A port name the container does not declare fails the probe.
func TestHTTPUnknownPort(t *testing.T) {
	target, g := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	g.Port = intstr.FromString("nope")
	if r, out := httpProbe(t, target, g, time.Second); r != Failure || out != "couldn't find port: nope in c" {
		t.Errorf("got %v %q", r, out)
	}
}
