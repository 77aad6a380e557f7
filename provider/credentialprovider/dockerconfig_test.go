package credentialprovider

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	clocktesting "k8s.io/utils/clock/testing"
)

// Entries as the kubelet decodes them: auth (padded or not) wins over
// username and password; a malformed one fails the file.
func TestParseDockerConfig(t *testing.T) {
	cfg, err := ParseDockerConfigJSON([]byte(`{"auths":{
		"a.io":{"username":"u","password":"p"},
		"b.io":{"username":"ignored","auth":"dXNlcjpwYTpzcw=="},
		"c.io":{"auth":"dXNlcjpwYTpzcw"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DockerConfig{"a.io": {Username: "u", Password: "p"}, "b.io": {Username: "user", Password: "pa:ss"}, "c.io": {Username: "user", Password: "pa:ss"}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("%v, want %v", cfg, want)
	}
	if _, err := ParseDockercfg([]byte(`{"a.io":{"auth":"bm9jb2xvbg=="}}`)); err == nil {
		t.Error("auth without a colon accepted")
	}
}

// The node's files as the kubelet's default keyring finds them: the first
// valid config.json of the search path, else the first .dockercfg; read
// again after 5 minutes. Their credentials come before the plugins'.
func TestNodeFiles(t *testing.T) {
	root, home := t.TempDir(), t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	n := &NodeFiles{jsonDirs: []string{root, filepath.Join(home, ".docker")}, cfgDirs: []string{root, home}, clock: clk}
	write := func(p, s string) {
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Provide(); len(got) != 0 {
		t.Errorf("no files: %v", got)
	}
	write(filepath.Join(home, ".dockercfg"), `{"reg.io":{"username":"old"}}`)
	write(filepath.Join(root, "config.json"), `not json`)
	write(filepath.Join(home, ".docker", "config.json"), `{"auths":{"reg.io":{"username":"home"}}}`)
	if got := n.Provide(); len(got) != 0 {
		t.Errorf("before 5 minutes: %v", got)
	}
	clk.Step(5*time.Minute + time.Second)
	if got := n.Provide()["reg.io"].Username; got != "home" {
		t.Errorf("user %q, want home's config.json (root's is not valid)", got)
	}
	_ = os.Remove(filepath.Join(home, ".docker", "config.json"))
	clk.Step(6 * time.Minute)
	if got := n.Provide()["reg.io"].Username; got != "old" {
		t.Errorf("user %q, want the .dockercfg", got)
	}

	f := &fakePlugin{resp: func(*credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
		return &credentialproviderapi.CredentialProviderResponse{CacheKeyType: credentialproviderapi.GlobalPluginCacheKeyType,
			Auth: map[string]credentialproviderapi.AuthConfig{"reg.io": {Username: "plugin"}}}, nil
	}}
	ps := newTestProviders(f, clk, 0)
	ps.plugins[0].matchImages = []string{"reg.io"}
	var users []string
	for _, a := range (NodeCredentials{Files: n, Plugins: ps}).Lookup(context.Background(), "reg.io/app", Pod{}) {
		users = append(users, a.Username)
	}
	if want := []string{"old", "plugin"}; !reflect.DeepEqual(users, want) {
		t.Errorf("credentials %v, want %v", users, want)
	}
}
