package probes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	client := &http.Client{Transport: pr.transport, CheckRedirect: sameHostRedirects}
	res, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return Failure, err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxBody))
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return Success, string(body)
	case res.StatusCode >= 300 && res.StatusCode < 400:
		return Warning, "Probe terminated redirects, Response body: " + string(body)
	}
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode)
}

// sameHostRedirects follows redirects on the probed host only, as the
// kubelet does; a redirect elsewhere ends the probe with a warning.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
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
