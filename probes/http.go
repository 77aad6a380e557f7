package probes

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// UserAgent is what the kubelet's probes send.
const UserAgent = "kube-probe/1.35"

// maxBody is how much of a response the kubelet reads (10 KiB); the rest is
// ignored.
const maxBody = 10 * 1024

func (pr *Prober) httpGet(ctx context.Context, g *v1.HTTPGetAction, t Target, timeout time.Duration) (Result, string) {
	req, err := newRequest(ctx, g, t)
	if err != nil {
		return Failure, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	code, body, err := get(ctx, req.WithContext(ctx))
	if err != nil {
		return Failure, err.Error()
	}
	switch {
	case code >= 200 && code < 300:
		return Success, string(body)
	case code >= 300 && code < 400:
		return Warning, "Probe terminated redirects, Response body: " + string(body)
	}
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code)
}

// get does what the kubelet's probe client does (net/http's Client over a
// Transport without keep-alives, following redirects on the probed host
// only, up to 10), on the probe's own goroutine: one connection per request,
// written and read here. A Transport runs two goroutines per connection and
// hands each request and response between them, which was a third of
// hostlet's CPU on a node of probed pods. It returns the status code and
// up to maxBody of the last response's body; its errors read as the
// Client's ("Get \"url\": ...").
func get(ctx context.Context, req *http.Request) (int, []byte, error) {
	first := req
	for redirects := 0; ; redirects++ {
		res, body, err := exchange(ctx, req)
		if err != nil {
			return 0, nil, &url.Error{Op: "Get", URL: stripPassword(req.URL), Err: err}
		}
		loc := res.Header.Get("Location")
		switch res.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			return res.StatusCode, body, nil
		}
		if loc == "" {
			return res.StatusCode, body, nil
		}
		next, err := req.URL.Parse(loc)
		if err != nil {
			return 0, nil, &url.Error{Op: "Get", URL: stripPassword(req.URL), Err: fmt.Errorf("failed to parse Location header %q: %v", loc, err)}
		}
		// The kubelet's redirect checker: another host ends the probe with
		// the redirect as its response, and the 11th request is not sent.
		if next.Hostname() != first.URL.Hostname() {
			return res.StatusCode, body, nil
		}
		if redirects+1 >= 10 {
			// The Client names the Location header, as it was sent.
			return 0, nil, &url.Error{Op: "Get", URL: loc, Err: errors.New("stopped after 10 redirects")}
		}
		nreq := &http.Request{Method: http.MethodGet, URL: next, Header: first.Header.Clone(), Host: next.Host, Close: true}
		// As the Client: a Host header set by the probe is kept through a
		// relative redirect only.
		if first.Host != "" && first.Host != first.URL.Host {
			if u, _ := url.Parse(loc); u != nil && !u.IsAbs() {
				nreq.Host = first.Host
			}
		}
		if ref := referer(req.URL, next); ref != "" {
			nreq.Header.Set("Referer", ref)
		}
		req = nreq.WithContext(ctx)
	}
}

// exchange sends req on a connection of its own and reads the response
// and up to maxBody of its body; the connection is closed after.
func exchange(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return nil, nil, fmt.Errorf("unsupported protocol scheme %q", s)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(req.URL.Hostname(), port)
	}
	conn, err := probeDialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = conn.Close() }()
	// The deadline bounds the exchange; a cancelled probe (the pod stopped)
	// ends it at once.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if req.URL.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: req.URL.Hostname()})
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, ctxErr(ctx, err)
		}
		conn = tc
	}
	// Connection: close, as a Transport without keep-alives sends.
	req.Close = true
	w := bufio.NewWriterSize(conn, 1024)
	if err := req.Write(w); err != nil {
		return nil, nil, ctxErr(ctx, err)
	}
	if err := w.Flush(); err != nil {
		return nil, nil, ctxErr(ctx, err)
	}
	r := bufio.NewReaderSize(conn, 2048)
	for {
		res, err := http.ReadResponse(r, req)
		if err != nil {
			return nil, nil, ctxErr(ctx, err)
		}
		// Informational responses come before the real one; a Transport
		// skips them too.
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxBody))
		return res, body, nil
	}
}

// ctxErr is the context's error when it ended the exchange, as a Client
// reports it. The connection's deadline is the context's, but its timer
// can fire before the context's: a timeout is the context's deadline.
func ctxErr(ctx context.Context, err error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// probeDialer dials probe connections: lingering closes (dialer), and no
// TCP keep-alive, which a connection that lives at most the probe's
// timeout never uses.
var probeDialer = func() *net.Dialer {
	d := dialer()
	d.KeepAlive = -1
	return d
}()

// referer is the Referer a Client sends on a redirect: the previous URL
// without its user, none from https to http.
func referer(last, next *url.URL) string {
	if last.Scheme == "https" && next.Scheme == "http" {
		return ""
	}
	if last.User != nil {
		u := *last
		u.User = nil
		return u.String()
	}
	return last.String()
}

// stripPassword is the URL as a Client's errors show it.
func stripPassword(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

func newRequest(ctx context.Context, g *v1.HTTPGetAction, t Target) (*http.Request, error) {
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := g.Host
	if host == "" {
		host = t.PodIP
	}
	port, err := resolvePort(g.Port, t.Container)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		u = &url.URL{Path: g.Path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", UserAgent)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	} else if req.Header.Get("Accept") == "" {
		req.Header.Del("Accept")
	}
	req.Host = req.Header.Get("Host")
	return req, nil
}
