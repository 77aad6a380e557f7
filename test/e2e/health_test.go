package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

// notifySocket is a unix datagram socket the test makes as systemd's
// NOTIFY_SOCKET: what hostlet sends arrives, in order, on states.
type notifySocket struct {
	path   string
	conn   *net.UnixConn
	states chan string
}

func newNotifySocket(t *testing.T) *notifySocket {
	// Short: a socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "nfy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	n := &notifySocket{path: path, conn: conn, states: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				close(n.states)
				return
			}
			n.states <- string(buf[:k])
		}
	}()
	return n
}

// await reads states until want arrives.
func (n *notifySocket) await(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case s, ok := <-n.states:
			if !ok {
				t.Fatalf("notify socket closed before %q", want)
			}
			if s == want {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %q on the notify socket: %v", want, ctx.Err())
		}
	}
}

// mark sends marker to the socket itself: whatever hostlet sent before is
// read before it.
func (n *notifySocket) mark(t *testing.T, marker string) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(marker)); err != nil {
		t.Fatal(err)
	}
}

func getHealthz(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitHealthz polls /healthz (a GET: nothing to watch) until ok says so.
func waitHealthz(ctx context.Context, t *testing.T, url string, ok func(code int, body string) bool) (int, string) {
	t.Helper()
	var code int
	var body string
	var err error
	for {
		code, body, err = getHealthz(ctx, url)
		if err == nil && ok(code, body) {
			return code, body
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: last %d %q %v: %v", url, code, body, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// countLines is how many lines of the file hold s.
func countLines(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// TestNodeHealth runs a hostlet of its own cluster (its containerd is
// frozen here) under a notify socket the test makes, as systemd would
// with Type=notify and WatchdogSec=4s: READY=1 once the node is up,
// WATCHDOG=1 every 2 s while /healthz passes; containerd frozen (SIGSTOP:
// its socket accepts, nothing answers) fails the runtime check, /healthz
// says which, and the pings stop; thawed, both come back; stopped, it says
// STOPPING=1. The node log query is asked of the same hostlet through the
// API server's node proxy.
func TestNodeHealth(t *testing.T) {
	skipIfNoCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// NodeNetns: the node has an address of its own, which the API
	// server's node proxy accepts (it refuses loopback ones).
	own, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	sock := newNotifySocket(t)
	const name = "hostlet-health"
	h, err := own.StartHostlet(ctx, harness.HostletOptions{
		Binary: hostletBinary(t), NodeName: name,
		Env:       []string{"NOTIFY_SOCKET=" + sock.path, "WATCHDOG_USEC=4000000"},
		ExtraArgs: []string{"--feature-gates", "NodeLogQuery=true", "--enable-system-log-query"},
	})
	if err != nil {
		t.Fatal(err)
	}
	sock.await(ctx, t, "READY=1")
	sock.await(ctx, t, "WATCHDOG=1")
	sock.await(ctx, t, "WATCHDOG=1")

	t.Run("node log query", func(t *testing.T) { testNodeLogQuery(ctx, t, own, name) })

	url := h.HealthzURL()
	if code, body, err := getHealthz(ctx, url); err != nil || code != 200 || body != "ok" {
		t.Fatalf("/healthz: %d %q %v", code, body, err)
	}
	if code, body, err := getHealthz(ctx, url+"?verbose"); err != nil || code != 200 ||
		body != "[+]ping ok\n[+]syncloop ok\n[+]pleg ok\n[+]runtime ok\nhealthz check passed\n" {
		t.Fatalf("/healthz?verbose: %d %q %v", code, body, err)
	}
	// The kubelet API serves the same checks (nodes/healthz).
	if out, err := own.Kubectl(ctx, "get", "--raw", "/api/v1/nodes/"+name+"/proxy/healthz?verbose"); err != nil || !strings.Contains(out, "[+]runtime ok") {
		t.Fatalf("kubelet API /healthz: %q %v", out, err)
	}

	if err := own.SignalContainerd(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := own.SignalContainerd(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	t0 := time.Now()
	_, body := waitHealthz(ctx, t, url, func(code int, _ string) bool { return code == http.StatusInternalServerError })
	t.Logf("/healthz failing %v after containerd froze:\n%s", time.Since(t0).Round(time.Millisecond), body)
	if !strings.Contains(body, "[-]runtime failed: reason withheld\n") || !strings.Contains(body, "[+]syncloop ok\n") || !strings.HasSuffix(body, "healthz check failed\n") {
		t.Errorf("/healthz with containerd frozen: %q", body)
	}
	if code, body, err := getHealthz(ctx, url+"/runtime"); err != nil || code != 500 || !strings.Contains(body, "containerd was last seen active") {
		t.Errorf("/healthz/runtime: %d %q %v", code, body, err)
	}
	// The pings stopped: once hostlet logged a withheld ping, whatever it
	// sent before is before the marker; from the marker until two more
	// withheld pings (two watchdog intervals), nothing.
	const withheld = "not pinging systemd's watchdog this time"
	logPath := h.LogPath()
	waitLog := func(atLeast int) {
		t.Helper()
		for countLines(t, logPath, withheld) < atLeast {
			select {
			case <-ctx.Done():
				t.Fatalf("hostlet never logged %q %d times", withheld, atLeast)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	waitLog(1)
	before := countLines(t, logPath, withheld)
	sock.mark(t, "MARK")
	sock.await(ctx, t, "MARK")
	waitLog(before + 2)
	sock.mark(t, "MARK2")
	for s := range sock.states {
		if s == "MARK2" {
			break
		}
		t.Errorf("%q sent while /healthz failed", s)
	}

	thaw()
	waitHealthz(ctx, t, url, func(code int, body string) bool { return code == 200 && body == "ok" })
	sock.await(ctx, t, "WATCHDOG=1")

	// Stopped (SIGTERM, as systemd stops it): STOPPING=1.
	h.Stop()
	sock.mark(t, "MARK3")
	stopping := false
	for s := range sock.states {
		if s == "MARK3" {
			break
		}
		stopping = stopping || s == "STOPPING=1"
	}
	if !stopping {
		t.Error("no STOPPING=1 when hostlet was stopped")
	}
}

// testNodeLogQuery asks the kubelet's node log query of hostlet through
// the API server (kubectl get --raw .../proxy/logs/...): what the test can
// be sure of on any machine, journal or none. A service the journal does
// not know and /var/log has no file of is "log not found"; the kubelet's
// validation errors (406, their text in kubectl's error; 400).
func testNodeLogQuery(ctx context.Context, t *testing.T, c *harness.Cluster, node string) {
	raw := func(path string) (string, error) {
		return c.Kubectl(ctx, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/logs/"+path)
	}
	const svc = "hostlet-e2e-no-such-service"
	if out, err := raw("?query=" + svc); err != nil || out != "\nlog not found for "+svc+"\n" {
		t.Errorf("query=%s: %q %v", svc, out, err)
	}
	if out, err := raw("?query=" + svc + "&tailLines=5"); err != nil || !strings.Contains(out, "options present and query resolved to log files for ["+svc+"]") {
		t.Errorf("query=%s&tailLines=5: %q %v", svc, out, err)
	}
	for _, tc := range []struct{ path, want string }{
		{"?query=a%20b", "input contains unsupported characters"},
		{"?query=kubelet&tailLines=100001", "must be between 0 and 100000, inclusive"},
		{"?query=kubelet&boot=1", "must be less than 1"},
		// A 400's text kubectl does not show: "the server rejected our
		// request for an unknown reason", as from the kubelet.
		{"?query=kubelet&sinceTime=yesterday", "Error from server (BadRequest)"},
		{"?query=kubelet&sinceTime=2026-01-02T00:00:00Z&untilTime=2026-01-01T00:00:00Z", "must be after `sinceTime`"},
		{"?query=kubelet&pattern=" + "a%5C", "pattern: Invalid value"},
		{"?query=a&query=b&query=c&query=d&query=e", "must have at most 4 items"},
		{"?query=/" + svc + ".log", "query: Invalid value"},
		{"x.log?query=kubelet", "path not allowed in query mode"},
	} {
		out, err := raw(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q %v, want an error with %q", tc.path, out, err, tc.want)
		}
	}
	// No query: the node's /var/log, listed.
	if out, err := raw(""); err != nil || !strings.Contains(out, "<pre>") {
		t.Errorf("/logs/: %q %v", out, err)
	}
}
