// Package probes runs container probes (exec, httpGet, tcpSocket, grpc) and
// lifecycle hooks as the kubelet does, and the periodic workers that turn
// probe results into liveness, readiness and startup decisions.
package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Result of one probe run.
type Result int

const (
	Success Result = iota
	Failure
	// Warning is a success worth an event (a redirect the probe did not follow).
	Warning
)

// UserAgent is what the kubelet's probes send.
const UserAgent = "kube-probe/1.35"

const maxBody = 10 * 1024

// Target is the container a probe or hook runs against.
type Target struct {
	// PodIP is the default host of httpGet, tcpSocket and grpc handlers.
	PodIP     string
	Container *v1.Container
	// Exec runs a command in the container, bounded by timeout (zero: none).
	Exec func(ctx context.Context, cmd []string, timeout time.Duration) ([]byte, int, error)
}

// ErrExecTimeout is returned by Target.Exec when the command outran its timeout.
var ErrExecTimeout = errors.New("command timed out")

// Prober runs probe and hook handlers. It is safe for concurrent use; one
// serves the whole node.
type Prober struct {
	transport *http.Transport
}

// dialer closes probe connections with SO_LINGER 1 so thousands of probes
// do not leave sockets in TIME_WAIT, as the kubelet's probe dialer does.
func dialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
	}}
}

func NewProber() *Prober {
	return &Prober{transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives:  true,
		DisableCompression: true,
		Proxy:              nil,
		DialContext:        dialer().DialContext,
	}}
}

// Probe runs one probe handler.
func (pr *Prober) Probe(ctx context.Context, h *v1.ProbeHandler, t Target, timeout time.Duration) (Result, string) {
	switch {
	case h.Exec != nil:
		out, code, err := t.Exec(ctx, expandStatic(h.Exec.Command, t.Container), timeout)
		if errors.Is(err, ErrExecTimeout) {
			return Failure, fmt.Sprintf("command %q timed out", strings.Join(h.Exec.Command, " "))
		}
		if err != nil {
			return Failure, err.Error()
		}
		if code != 0 {
			return Failure, string(out)
		}
		return Success, string(out)
	case h.HTTPGet != nil:
		return pr.httpGet(ctx, h.HTTPGet, t, timeout)
	case h.TCPSocket != nil:
		port, err := resolvePort(h.TCPSocket.Port, t.Container)
		if err != nil {
			return Failure, err.Error()
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = t.PodIP
		}
		return tcp(ctx, net.JoinHostPort(host, strconv.Itoa(port)), timeout)
	case h.GRPC != nil:
		svc := ""
		if h.GRPC.Service != nil {
			svc = *h.GRPC.Service
		}
		return grpcHealth(ctx, net.JoinHostPort(t.PodIP, strconv.Itoa(int(h.GRPC.Port))), svc, timeout)
	}
	return Failure, "missing probe handler"
}

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

func tcp(ctx context.Context, addr string, timeout time.Duration) (Result, string) {
	d := dialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Failure, err.Error()
	}
	_ = conn.Close()
	return Success, ""
}

func grpcHealth(ctx context.Context, addr, service string, timeout time.Duration) (Result, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dialer().DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message()
			case codes.DeadlineExceeded:
				return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, timeout, err)
			}
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return Success, "service healthy"
}

// resolvePort turns a port number or a named container port into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number: %v", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if c != nil {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("couldn't find port: %v in %v", p.StrVal, containerName(c))
}

func containerName(c *v1.Container) string {
	if c == nil {
		return ""
	}
	return c.Name
}

// expandStatic expands $(VAR) in an exec command with the container's
// literal env values only, as the kubelet does for exec probes and hooks.
func expandStatic(cmd []string, c *v1.Container) []string {
	if c == nil {
		return cmd
	}
	vals := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vals[e.Name] = e.Value
		}
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expand(s, vals)
	}
	return out
}

func expand(s string, vals map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += end + 2
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
