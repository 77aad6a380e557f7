package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// options are hostlet's settings, named like the kubelet's flags.
type options struct {
	kubeconfig        string
	configFile        string
	hostnameOverride  string
	nodeIP            string
	externalIP        string
	nodeLabels        map[string]string
	taints            []string
	maxPods           int
	rootDir           string
	runtimeEndpoint   string
	containerdNS      string
	cniConfDir        string
	cniBinDirs        []string
	cniCacheDir       string
	registryConfigDir string
	address           string
	port              int32
	tlsCert, tlsKey   string
	clientCA          string
	clusterDNS        []string
	clusterDomain     string
	resolvConf        string
	systemReserved    map[string]string
	kubeReserved      map[string]string
	evictionHard      map[string]string
	statusUpdateFreq  time.Duration
	statusReportFreq  time.Duration
	maxRestartPeriod  time.Duration
	verbosity         int
}

func (o *options) flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("hostlet", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "/etc/hostlet/kubeconfig", "kubeconfig with the node's identity (system:node:<name>)")
	fs.StringVar(&o.configFile, "config", "", "YAML file of settings keyed by flag name; command-line flags win")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "node name (default: the host name)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "node InternalIP (default: the address of the default route)")
	fs.StringVar(&o.externalIP, "external-ip", "", "node ExternalIP, if any")
	fs.StringToStringVar(&o.nodeLabels, "node-labels", nil, "labels to add when registering the node (key=value,...)")
	fs.StringSliceVar(&o.taints, "register-with-taints", nil, "taints to register the node with (key=value:Effect,...)")
	fs.IntVar(&o.maxPods, "max-pods", 110, "number of pods this node can run")
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/hostlet", "directory for pod state, volumes and logs")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "containerd endpoint")
	fs.StringVar(&o.containerdNS, "containerd-namespace", "hostlet", "containerd namespace holding hostlet's images and containers")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI network configs")
	fs.StringSliceVar(&o.cniBinDirs, "cni-bin-dir", []string{"/opt/cni/bin", "/usr/lib/cni"}, "CNI plugin directories")
	fs.StringVar(&o.cniCacheDir, "cni-cache-dir", "/var/lib/cni", "CNI result cache")
	fs.StringVar(&o.registryConfigDir, "registry-config-dir", "", "containerd-style hosts.toml directory per registry")
	fs.StringVar(&o.address, "address", "0.0.0.0", "IP to serve the kubelet API on")
	fs.Int32Var(&o.port, "port", 10250, "port of the kubelet API")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate of the kubelet API")
	fs.StringVar(&o.tlsKey, "tls-private-key-file", "", "key of the serving certificate")
	fs.StringVar(&o.clientCA, "client-ca-file", "", "CA that signs client certificates of kubelet API callers")
	fs.StringSliceVar(&o.clusterDNS, "cluster-dns", nil, "cluster DNS server IPs")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "cluster domain")
	fs.StringVar(&o.resolvConf, "resolv-conf", "/etc/resolv.conf", "resolver configuration of pods with dnsPolicy Default")
	fs.StringToStringVar(&o.systemReserved, "system-reserved", nil, "resources reserved for the system (cpu=100m,memory=100Mi,...)")
	fs.StringToStringVar(&o.kubeReserved, "kube-reserved", nil, "resources reserved for Kubernetes components")
	fs.StringToStringVar(&o.evictionHard, "eviction-hard", map[string]string{
		"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%",
	}, "hard eviction thresholds (signal=quantity or percentage)")
	fs.DurationVar(&o.statusUpdateFreq, "node-status-update-frequency", 10*time.Second, "how often node status is computed")
	fs.DurationVar(&o.statusReportFreq, "node-status-report-frequency", 5*time.Minute, "how often unchanged node status is written")
	fs.DurationVar(&o.maxRestartPeriod, "max-container-restart-period", 300*time.Second, "longest crash-loop back-off")
	fs.IntVarP(&o.verbosity, "v", "v", 2, "log verbosity (0-2 info, 3+ debug)")
	return fs
}

// parse reads the command line, then fills unset flags from the config file.
func (o *options) parse(args []string) error {
	fs := o.flags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.configFile == "" {
		return nil
	}
	b, err := os.ReadFile(o.configFile)
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		return fmt.Errorf("config file %s: %w", o.configFile, err)
	}
	for name, v := range values {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("config file %s: unknown setting %q", o.configFile, name)
		}
		if f.Changed {
			continue
		}
		if err := fs.Set(name, configValue(v)); err != nil {
			return fmt.Errorf("config file %s: %s: %w", o.configFile, name, err)
		}
	}
	return nil
}

// configValue renders a YAML value as its flag string: lists join with
// commas, maps as key=value pairs.
func configValue(v any) string {
	switch t := v.(type) {
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		var parts []string
		for k, e := range t {
			parts = append(parts, k+"="+fmt.Sprint(e))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// parseTaints reads "key=value:Effect" or "key:Effect".
func parseTaints(specs []string) ([]v1.Taint, error) {
	var out []v1.Taint
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok {
			return nil, fmt.Errorf("invalid taint %q: want key=value:Effect", s)
		}
		k, val, _ := strings.Cut(kv, "=")
		e := v1.TaintEffect(effect)
		if e != v1.TaintEffectNoSchedule && e != v1.TaintEffectPreferNoSchedule && e != v1.TaintEffectNoExecute {
			return nil, fmt.Errorf("invalid taint effect %q", effect)
		}
		out = append(out, v1.Taint{Key: k, Value: val, Effect: e})
	}
	return out, nil
}

func parseResources(maps ...map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, m := range maps {
		for k, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("invalid quantity %s=%s: %w", k, v, err)
			}
			cur := out[v1.ResourceName(k)]
			cur.Add(q)
			out[v1.ResourceName(k)] = cur
		}
	}
	return out, nil
}
