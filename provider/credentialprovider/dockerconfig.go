package credentialprovider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
)

// dockerConfigEntry decodes one registry's entry as the kubelet's
// DockerConfigEntry: an "auth" field (base64 of "user:password", padded or
// not) wins over username and password.
type dockerConfigEntry AuthConfig

func (e *dockerConfigEntry) UnmarshalJSON(data []byte) error {
	var tmp struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Auth     string `json:"auth,omitempty"`
	}
	if err := json.Unmarshal(data, &tmp); err != nil {
		return err
	}
	e.Username, e.Password = tmp.Username, tmp.Password
	if tmp.Auth == "" {
		return nil
	}
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(tmp.Auth), "=") {
		enc = base64.StdEncoding
	}
	decoded, err := enc.DecodeString(tmp.Auth)
	if err != nil {
		return err
	}
	user, pass, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return fmt.Errorf("unable to parse auth field, must be formatted as base64(username:password)")
	}
	e.Username, e.Password = user, pass
	return nil
}

func toDockerConfig(m map[string]dockerConfigEntry) DockerConfig {
	out := make(DockerConfig, len(m))
	for k, v := range m {
		out[k] = AuthConfig(v)
	}
	return out
}

// ParseDockerConfigJSON reads a config.json or .dockerconfigjson
// ({"auths": {...}}).
func ParseDockerConfigJSON(b []byte) (DockerConfig, error) {
	var cfg struct {
		Auths map[string]dockerConfigEntry `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, errors.New("error occurred while trying to unmarshal json")
	}
	return toDockerConfig(cfg.Auths), nil
}

// ParseDockercfg reads the older .dockercfg (the map of registries itself).
func ParseDockercfg(b []byte) (DockerConfig, error) {
	var m map[string]dockerConfigEntry
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.New("error occurred while trying to unmarshal json")
	}
	return toDockerConfig(m), nil
}

// nodeFilesLifetime is how long the kubelet keeps what it read of the
// node's docker config files.
const nodeFilesLifetime = 5 * time.Minute

// NodeFiles are the node's own registry credentials, the kubelet's default
// keyring: the first valid config.json under --root-dir, the working
// directory, $HOME/.docker or /.docker, else the first .dockercfg under
// --root-dir, the working directory, $HOME or /; read again every 5
// minutes.
type NodeFiles struct {
	jsonDirs, cfgDirs []string
	clock             clock.Clock

	mu      sync.Mutex
	cfg     DockerConfig
	expires time.Time
}

// NewNodeFiles searches the kubelet's places, rootDir first.
func NewNodeFiles(rootDir string, clk clock.Clock) *NodeFiles {
	home, _ := os.UserHomeDir()
	return &NodeFiles{
		jsonDirs: []string{rootDir, "", filepath.Join(home, ".docker"), "/.docker"},
		cfgDirs:  []string{rootDir, "", home, "/"},
		clock:    clk,
	}
}

// Provide is the credentials the files hold now.
func (n *NodeFiles) Provide() DockerConfig {
	n.mu.Lock()
	defer n.mu.Unlock()
	if now := n.clock.Now(); now.After(n.expires) {
		n.cfg = n.read()
		n.expires = now.Add(nodeFilesLifetime)
	}
	return n.cfg
}

func (n *NodeFiles) read() DockerConfig {
	for _, files := range []struct {
		dirs  []string
		name  string
		parse func([]byte) (DockerConfig, error)
	}{{n.jsonDirs, "config.json", ParseDockerConfigJSON}, {n.cfgDirs, ".dockercfg", ParseDockercfg}} {
		for _, dir := range files.dirs {
			p, err := filepath.Abs(filepath.Join(dir, files.name))
			if err != nil {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			cfg, err := files.parse(b)
			if err != nil {
				log.WithError(err).WithField("file", p).Debug("docker config file not valid")
				continue
			}
			return cfg
		}
	}
	return DockerConfig{}
}

// NodeCredentials are what the kubelet's keyring holds after a pod's pull
// secrets: the node's docker config files, then the credential provider
// plugins (nil: none configured).
type NodeCredentials struct {
	Files   *NodeFiles
	Plugins *Providers
}

// Lookup returns the files' credentials matching image, then the plugins'.
func (n NodeCredentials) Lookup(ctx context.Context, image string, pod Pod) []AuthConfig {
	var out []AuthConfig
	if n.Files != nil {
		k := &Keyring{}
		k.Add(n.Files.Provide())
		out = k.Lookup(image)
	}
	return append(out, n.Plugins.Lookup(ctx, image, pod)...)
}
