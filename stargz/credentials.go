package stargz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The snapshotter fetches an image's layers long after the pull that
// mounted them (on demand, and in the background), so it needs the pull's
// registry credentials for as long as the image is mounted. hostlet is not
// CRI, so stargz's CRI keychain (which snoops the kubelet's PullImage
// calls) cannot see them, and labels would store them in containerd's
// metadata. Instead hostlet hands each pull's credentials to the
// snapshotter process over a root-only unix socket before the pull
// (SendCredentials), and the snapshotter keeps them in memory by image
// reference (Credentials.Lookup). A restarted snapshotter knows none: so
// it serves this socket first, and hostlet, seeing the socket made again,
// hands over once more the credentials of the images its running
// containers use (it holds them in memory only) and then says it is done
// (SendSynced); the snapshotter waits for that, bounded, before it
// remounts its snapshots from their registries.

// credentialsPath takes an image's credentials; syncedPath says hostlet
// has handed over all it holds.
const (
	credentialsPath = "/credentials"
	syncedPath      = "/synced"
)

// entry is one image reference's credentials, as sent over the socket.
type entry struct {
	Ref      string `json:"ref"`
	Username string `json:"username"`
	Secret   string `json:"secret"`
}

// Credentials are the registry credentials hostlet handed over, by image
// reference ("registry/repo:tag" as pulled).
type Credentials struct {
	mu sync.Mutex
	m  map[string]entry
	// synced is closed at the first PUT /synced.
	syncOnce sync.Once
	synced   chan struct{}
}

// Synced is closed once hostlet said it handed over all it holds.
func (c *Credentials) Synced() <-chan struct{} { return c.syncedChan() }

func (c *Credentials) syncedChan() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced == nil {
		c.synced = make(chan struct{})
	}
	return c.synced
}

// credentialsMax bounds the store: each pulled reference adds one entry;
// past this the oldest are not worth tracking, so the map is cleared.
const credentialsMax = 4096

// Lookup returns the credentials last given for ref ("", "" if none: the
// registry is then asked anonymously). Every registry host serving ref
// (a mirror included) is offered them, as hostlet's own pull does.
func (c *Credentials) Lookup(ref string) (user, secret string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[ref]
	return e.Username, e.Secret
}

func (c *Credentials) set(e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= credentialsMax {
		c.m = map[string]entry{}
	}
	if e.Username == "" && e.Secret == "" {
		delete(c.m, e.Ref) // an anonymous pull: forget older ones
		return
	}
	c.m[e.Ref] = e
}

// ServeHTTP takes PUT /credentials with an entry as JSON, and PUT
// /synced.
func (c *Credentials) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == syncedPath && r.Method == http.MethodPut {
		ch := c.syncedChan()
		c.syncOnce.Do(func() { close(ch) })
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.URL.Path != credentialsPath || r.Method != http.MethodPut {
		http.Error(w, "only PUT "+credentialsPath+" or "+syncedPath, http.StatusNotFound)
		return
	}
	var e entry
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&e); err != nil || e.Ref == "" {
		http.Error(w, fmt.Sprintf("want {ref, username, secret}: %v", err), http.StatusBadRequest)
		return
	}
	c.set(e)
	w.WriteHeader(http.StatusNoContent)
}

// SendCredentials hands ref's credentials (empty: anonymous) to the
// snapshotter listening on socket.
func SendCredentials(ctx context.Context, socket, ref, user, secret string) error {
	body, err := json.Marshal(entry{Ref: ref, Username: user, Secret: secret})
	if err != nil {
		return err
	}
	return put(ctx, socket, credentialsPath, body)
}

// SendSynced tells the snapshotter on socket that every credential held
// was handed over again.
func SendSynced(ctx context.Context, socket string) error {
	return put(ctx, socket, syncedPath, nil)
}

func put(ctx context.Context, socket, path string, body []byte) error {
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://stargz"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("stargz snapshotter credentials socket: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("stargz snapshotter credentials socket: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
