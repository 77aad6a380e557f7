package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
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

// get answers as the kubelet's probe client (net/http's Client over a
// Transport without keep-alives, with the kubelet's redirect checker):
// the same status, body and error text, over HTTP and HTTPS, through
// redirects, chunked bodies and informational responses. The server sees
// the same request.
func TestGetAsClient(t *testing.T) {
	kubeletChecker := func(req *http.Request, via []*http.Request) error {
		if req.URL.Hostname() != via[0].URL.Hostname() {
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	client := &http.Client{CheckRedirect: kubeletChecker, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true, DisableCompression: true,
	}}
	viaClient := func(ctx context.Context, req *http.Request) (int, string, error) {
		res, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxBody))
		return res.StatusCode, string(b), nil
	}
	seen := make(chan string, 100)
	h := func(w http.ResponseWriter, r *http.Request) {
		seen <- fmt.Sprintf("%s %s host=%s ua=%q accept=%q ref=%q conn=%q x=%v enc=%q", r.Method, r.URL, r.Host, r.UserAgent(), r.Header.Get("Accept"), r.Referer(), r.Header.Get("Connection"), r.Header.Values("X-A"), r.Header.Get("Accept-Encoding"))
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, "fine")
		case "/rel":
			http.Redirect(w, r, "/ok?from=rel", http.StatusMovedPermanently)
		case "/abs":
			w.Header().Set("Location", "http://"+r.Host+"/ok")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case "/away":
			w.Header().Set("Location", "http://192.0.2.1/x")
			w.WriteHeader(http.StatusFound)
			fmt.Fprint(w, "moved")
		case "/noloc":
			w.WriteHeader(http.StatusFound)
			fmt.Fprint(w, "nowhere")
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/chunked":
			for range 3 {
				fmt.Fprint(w, strings.Repeat("c", 6000))
				w.(http.Flusher).Flush()
			}
		case "/early":
			w.WriteHeader(http.StatusEarlyHints)
			fmt.Fprint(w, "after hints")
		case "/bad":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "down")
		}
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tls := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(h))
		// "/abs" sends the HTTPS server's client to it over HTTP, which
		// both fail alike; its log line is noise.
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		for _, tc := range []struct {
			path    string
			headers http.Header
		}{
			{"/ok", nil}, {"/rel", nil}, {"/abs", nil}, {"/away", nil}, {"/noloc", nil}, {"/loop", nil},
			{"/chunked", nil}, {"/early", nil}, {"/bad", nil},
			{"/rel", http.Header{"X-A": {"1", "2"}, "Host": {"example.test"}, "Accept": {"text/plain"}}},
			{"/abs", http.Header{"Host": {"example.test"}}},
		} {
			for _, base := range []string{srv.URL, "http://" + closedAddr} {
				var got, want [3]string
				var sawGot, sawWant []string
				for i, f := range []func(context.Context, *http.Request) (int, string, error){
					viaClient,
					func(ctx context.Context, req *http.Request) (int, string, error) {
						code, b, err := get(ctx, req)
						return code, string(b), err
					},
				} {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.path, nil)
					for k, vs := range tc.headers {
						for _, v := range vs {
							req.Header.Add(k, v)
						}
					}
					req.Header.Set("User-Agent", UserAgent)
					req.Host = req.Header.Get("Host")
					code, body, err := f(ctx, req)
					cancel()
					r := [3]string{fmt.Sprint(code), body, fmt.Sprint(err)}
					var s []string
					for len(seen) > 0 {
						s = append(s, <-seen)
					}
					if i == 0 {
						want, sawWant = r, s
					} else {
						got, sawGot = r, s
					}
				}
				if got != want {
					t.Errorf("%s%s %v: got %q, the Client %q", base, tc.path, tc.headers, got, want)
				}
				if strings.Join(sawGot, "\n") != strings.Join(sawWant, "\n") {
					t.Errorf("%s%s %v: the server saw\n%s\nfrom the Client\n%s", base, tc.path, tc.headers, strings.Join(sawGot, "\n"), strings.Join(sawWant, "\n"))
				}
			}
		}
		srv.Close()
	}
}
