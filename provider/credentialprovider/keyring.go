// Package credentialprovider is the kubelet's registry credentials: the
// keyring that matches a pod's pull secrets and the plugins' answers to an
// image (pkg/credentialprovider), and the credential provider plugins
// exec'd as --image-credential-provider-config configures them
// (pkg/credentialprovider/plugin, the credentialprovider.kubelet.k8s.io
// exec protocol).
package credentialprovider

import (
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
)

// AuthConfig is one credential for a registry, as the kubelet hands CRI.
type AuthConfig struct {
	Username string
	Password string
	// Source is where a pod's own credential came from (a pull secret, or
	// the service account whose token a plugin was given); nil for the
	// node's, which every pod may use. The kubelet records it with the
	// image pulled (KubeletEnsureSecretPulledImages).
	Source *Source
}

// Source names the object a credential was given for, as the kubelet's
// CredentialSource: one of Secret and ServiceAccount.
type Source struct {
	Secret, ServiceAccount *Coordinates
}

// Coordinates name a Secret or ServiceAccount: its namespace, name and UID.
type Coordinates struct {
	UID, Namespace, Name string
}

// DockerConfig maps registry locations ("host[:port][/path]", a scheme or
// "/v1/" allowed, globs in the host with plugins) to their credentials:
// the "auths" of a .dockerconfigjson, or a plugin's response.
type DockerConfig map[string]AuthConfig

// Keyring indexes credentials by registry location, as the kubelet's
// BasicDockerKeyring: an image gets every credential whose location
// matches it, the more specific locations first.
type Keyring struct {
	index []string
	creds map[string][]AuthConfig
}

const defaultRegistryHost = "index.docker.io"

// Add indexes cfg's credentials. Entries that are no URL are skipped, as the
// kubelet does.
func (k *Keyring) Add(cfg DockerConfig) {
	if k.creds == nil {
		k.creds = map[string][]AuthConfig{}
	}
	// Sorted, so that two credentials of one key keep a stable order.
	locs := make([]string, 0, len(cfg))
	for loc := range cfg {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	for _, loc := range locs {
		value := loc
		if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
			value = "https://" + value
		}
		parsed, err := url.Parse(value)
		if err != nil {
			continue
		}
		// docker accepts the host, or the host and a path; /v1/ and /v2/
		// mean the host.
		path := parsed.Path
		if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
			path = path[3:]
		}
		key := parsed.Host
		if path != "" && path != "/" {
			key += path
		}
		if _, ok := k.creds[key]; !ok {
			k.index = append(k.index, key)
		}
		k.creds[key] = append(k.creds[key], cfg[loc])
	}
	// Reverse order: "quay.io/coreos" before "quay.io".
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// Lookup returns the credentials for image (a repository without tag or
// digest, "docker.io/library/busybox"), the most specific location first;
// Docker Hub's "index.docker.io" credentials serve its images.
func (k *Keyring) Lookup(image string) []AuthConfig {
	var out []AuthConfig
	for _, key := range k.index {
		if ok, _ := URLsMatchStr(key, image); ok {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) > 0 {
		return out
	}
	if isDefaultRegistryMatch(image) {
		return k.creds[defaultRegistryHost]
	}
	return nil
}

// isDefaultRegistryMatch: the image is pulled from Docker Hub.
func isDefaultRegistryMatch(image string) bool {
	parts := strings.SplitN(image, "/", 2)
	if parts[0] == "" {
		return false
	}
	if len(parts) == 1 {
		return true
	}
	if parts[0] == "docker.io" || parts[0] == "index.docker.io" {
		return true
	}
	// A first part with a "." or ":" is a registry, else a Hub user.
	return !strings.ContainsAny(parts[0], ".:")
}

// ParseSchemelessURL parses "host[:port][/path]".
func ParseSchemelessURL(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

func splitURL(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// URLsMatchStr is URLsMatch on strings.
func URLsMatchStr(glob, target string) (bool, error) {
	g, err := ParseSchemelessURL(glob)
	if err != nil {
		return false, err
	}
	t, err := ParseSchemelessURL(target)
	if err != nil {
		return false, err
	}
	return URLsMatch(g, t)
}

// URLsMatch is the kubelet's match of a target against a glob URL: the
// same port, the same number of host parts each matching its glob part
// ("*.docker.io" matches "blah.docker.io", not "docker.io" nor
// "a.b.docker.io"), and the glob's path a prefix of the target's. No
// wildcards in ports or paths.
func URLsMatch(glob, target *url.URL) (bool, error) {
	gParts, gPort := splitURL(glob)
	tParts, tPort := splitURL(target)
	if gPort != tPort || len(gParts) != len(tParts) {
		return false, nil
	}
	if !strings.HasPrefix(target.Path, glob.Path) {
		return false, nil
	}
	for i, g := range gParts {
		ok, err := filepath.Match(g, tParts[i])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
