package join

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/certificate"
	"sigs.k8s.io/yaml"
)

// Layout is where join writes and leave removes: everything under StateDir,
// except the systemd unit under UnitDir.
type Layout struct {
	StateDir string // default /var/lib/hostlet
	UnitDir  string // default /etc/systemd/system
	// CrictlConfig is crictl's config file, written only if none exists
	// (default /etc/crictl.yaml; empty: not written).
	CrictlConfig string
}

// clientPairPrefix names the client certificate files, as the kubelet's
// kubelet-client-current.pem: certificate and key in one file behind a
// symlink, so a rotation (certificate.Manager) swaps both at once.
const clientPairPrefix = "hostlet-client"

func (l Layout) Kubeconfig() string  { return filepath.Join(l.StateDir, "kubeconfig") }
func (l Layout) ConfigFile() string  { return filepath.Join(l.StateDir, "config.yaml") }
func (l Layout) FlagsFile() string   { return filepath.Join(l.StateDir, "hostlet-flags.env") }
func (l Layout) PKIDir() string      { return filepath.Join(l.StateDir, "pki") }
func (l Layout) CAFile() string      { return filepath.Join(l.PKIDir(), "ca.crt") }
func (l Layout) ServingCert() string { return filepath.Join(l.PKIDir(), "hostlet.crt") }
func (l Layout) ServingKey() string  { return filepath.Join(l.PKIDir(), "hostlet.key") }
func (l Layout) UnitFile() string    { return filepath.Join(l.UnitDir, unitName) }

// ClientStore holds the node's client certificate and key (PKIDir()/hostlet-client-current.pem).
func (l Layout) ClientStore() (certificate.FileStore, error) {
	return certificate.NewFileStore(clientPairPrefix, l.PKIDir(), l.PKIDir(), "", "")
}

// ClientPairFile is the file the kubeconfig names for certificate and key.
func (l Layout) ClientPairFile() string {
	return filepath.Join(l.PKIDir(), clientPairPrefix+"-current.pem")
}

// currentIdentity returns the node name of a client certificate this host
// already holds, signed by ca and valid for another hour; "" if none.
func (l Layout) currentIdentity(caPEM []byte) string {
	pair, err := tls.LoadX509KeyPair(l.ClientPairFile(), l.ClientPairFile())
	if err != nil {
		return ""
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || time.Until(leaf.NotAfter) < time.Hour {
		return ""
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return ""
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return ""
	}
	name, ok := bytes.CutPrefix([]byte(leaf.Subject.CommonName), []byte("system:node:"))
	if !ok {
		return ""
	}
	return string(name)
}

// file is one file join writes.
type file struct {
	path    string
	mode    os.FileMode
	data    []byte
	private bool // not printed by --dry-run
}

// kubeconfigFile points hostlet at the server, trusting the discovered CA,
// with the client pair file (rotated in place) as its identity.
func kubeconfigFile(l Layout, c *Cluster, nodeName string) (file, error) {
	cfg := clientcmdapi.NewConfig()
	user := "system:node:" + nodeName
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.CAPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: l.ClientPairFile(), ClientKey: l.ClientPairFile()}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: user}
	cfg.CurrentContext = "default"
	b, err := clientcmd.Write(*cfg)
	return file{path: l.Kubeconfig(), mode: 0o600, data: b}, err
}

// configFile is hostlet's --config: a KubeletConfiguration.
func configFile(l Layout, kubelet map[string]any) (file, error) {
	b, err := yaml.Marshal(kubelet)
	if err != nil {
		return file{}, err
	}
	head := []byte("# Written by `hostlet join`; `hostlet leave` removes it. The kubelet's configuration file;\n" +
		"# hostlet's flags that are not its fields are in " + l.FlagsFile() + ".\n")
	return file{path: l.ConfigFile(), mode: 0o600, data: append(head, b...)}, nil
}

// flagsVar is the variable of the flags file the unit passes to hostlet.
const flagsVar = "HOSTLET_ARGS"

// flagsFile holds hostlet's flags besides its KubeletConfiguration, as
// kubeadm's kubeadm-flags.env holds the kubelet's: the unit reads it as
// an EnvironmentFile and passes $HOSTLET_ARGS (split at whitespace, which
// settings refuses in a value).
func flagsFile(l Layout, flags map[string]string) file {
	data := fmt.Sprintf("# Written by `hostlet join`; `hostlet leave` removes it. hostlet's flags besides %s.\n%s=\"%s\"\n",
		l.ConfigFile(), flagsVar, strings.Join(flagArgs(flags), " "))
	return file{path: l.FlagsFile(), mode: 0o644, data: []byte(data)}
}

// flagArgs are flags as --name=value arguments, sorted by name.
func flagArgs(flags map[string]string) []string {
	args := make([]string, 0, len(flags))
	for k, v := range flags {
		args = append(args, "--"+k+"="+v)
	}
	sort.Strings(args)
	return args
}

// ReadFlagsFile reads the flags join wrote to path (name to value); none
// (an empty map) if there is no such file: a host joined before join
// wrote one has all its settings in the config file.
func ReadFlagsFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	flags := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), flagsVar+"=")
		if !ok {
			continue
		}
		for _, arg := range strings.Fields(strings.Trim(v, `"`)) {
			name, value, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !ok || !strings.HasPrefix(arg, "--") {
				return nil, fmt.Errorf("%s: %q is not a --name=value flag", path, arg)
			}
			flags[name] = value
		}
	}
	return flags, nil
}

// servingFiles are a self-signed serving certificate for the kubelet API,
// what the kubelet makes when given none (with ECDSA keys:
// selfSignedServing); kept if present.
func servingFiles(l Layout, nodeName string) ([]file, error) {
	if _, err := os.Stat(l.ServingKey()); err == nil {
		return nil, nil
	}
	cert, key, err := selfSignedServing(nodeName, time.Now())
	if err != nil {
		return nil, err
	}
	return []file{
		{path: l.ServingCert(), mode: 0o644, data: cert},
		{path: l.ServingKey(), mode: 0o600, data: key, private: true},
	}, nil
}

// write puts f in place atomically and leaves an identical file alone, so a
// rerun of join changes nothing that is right.
func (f file) write() error {
	if old, err := os.ReadFile(f.path); err == nil && bytes.Equal(old, f.data) {
		return os.Chmod(f.path, f.mode)
	}
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// f.mode exactly, whatever the umask or an old file's mode (a key left
	// 0644 by hand becomes 0600 again): renameio.WriteFile would keep the
	// old file's mode.
	t, err := renameio.NewPendingFile(f.path, renameio.WithStaticPermissions(f.mode), renameio.WithTempDir(dir))
	if err != nil {
		return err
	}
	defer t.Cleanup()
	if _, err := t.Write(f.data); err != nil {
		return err
	}
	return t.CloseAtomicallyReplace()
}

// remove deletes what join wrote under l, and StateDir and its pki
// directory if nothing else is left in them.
func (l Layout) remove() error {
	var errs []error
	for _, p := range []string{l.Kubeconfig(), l.ConfigFile(), l.FlagsFile(), l.UnitFile()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(l.PKIDir()); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(l.StateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		if entries, _ := os.ReadDir(l.StateDir); len(entries) > 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return errors.Join(append(errs, fmt.Errorf("left %s in place: it holds more than join wrote (%v)", l.StateDir, names))...)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
