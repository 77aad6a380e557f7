package join

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Discovery runs beside preflight: a failed check is the join's error, not
// held up by a discovery still waiting for a server that does not answer
// (which it ends: the server's Close waits for the request to be dropped).
func TestPreflightFailureEndsDiscovery(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	ignore := map[string]bool{}
	for _, name := range CheckNames() {
		ignore[name] = name != "ContainerRuntime"
	}
	cfg := Config{
		Preflight: PreflightConfig{
			// No containerd there: the one check not ignored fails.
			RuntimeEndpoint: "unix://" + filepath.Join(t.TempDir(), "containerd.sock"),
			CNIConfDir:      t.TempDir(),
			Ignore:          ignore,
		},
		Discovery: DiscoveryConfig{
			Server: srv.URL, Token: "abcdef.0123456789abcdef",
			CAHashes: []string{"sha256:" + strings.Repeat("0", 64)},
			Timeout:  time.Hour,
		},
	}
	_, err := preflightAndDiscover(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "[ContainerRuntime]") {
		t.Fatalf("got %v, want the ContainerRuntime check's failure", err)
	}
}
