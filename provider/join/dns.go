package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Where a cluster publishes its nodes' DNS settings, both as a
// KubeletConfiguration under the key "kubelet" of a kube-system ConfigMap:
// kubeadm's kubelet-config (what kubeadm join reads), and the hostlet
// chart's, written from its values or the kube-dns Service for clusters
// kubeadm did not make.
const (
	kubeadmKubeletConfigMap = "kubelet-config"
	ChartKubeletConfigMap   = "hostlet-kubelet-config"
	kubeletConfigKey        = "kubelet"
)

// The flags of the settings join fills from the cluster, which a user may
// give with --hostlet-arg too; join writes them to the KubeletConfiguration.
const (
	clusterDNSSetting    = "cluster-dns"
	clusterDomainSetting = "cluster-domain"
)

// dnsSource is one place cluster DNS settings came from.
type dnsSource struct {
	name    string // where, as the user would look it up
	servers []string
	domain  string
}

// clusterDNS is what join writes for the node's pods' DNS, and where each
// part came from ("" when nothing had it).
type clusterDNS struct {
	servers            []string
	serversFrom        string
	domain, domainFrom string
}

// resolveDNS picks each setting from the first source that has it, in
// order: what the user gave, kubeadm's kubelet-config, the chart's. Each
// setting on its own, so --cluster-domain alone keeps the cluster's
// servers.
func resolveDNS(sources ...dnsSource) clusterDNS {
	var d clusterDNS
	for _, s := range sources {
		if d.servers == nil && len(s.servers) > 0 {
			d.servers, d.serversFrom = s.servers, s.name
		}
		if d.domain == "" && s.domain != "" {
			d.domain, d.domainFrom = s.domain, s.name
		}
	}
	return d
}

// apply writes what was found into hostlet's KubeletConfiguration; what
// was not found is left to the kubelet's defaults.
func (d clusterDNS) apply(kubelet map[string]any) {
	if d.servers != nil {
		kubelet["clusterDNS"] = d.servers
	}
	if d.domain != "" {
		kubelet["clusterDomain"] = d.domain
	}
}

// report logs where the settings came from and, when the cluster published
// no DNS server, tells the user on out what that means and how to fix it.
func (d clusterDNS) report(out io.Writer) {
	if d.servers == nil {
		fmt.Fprintf(out, "WARNING: no cluster DNS server found (neither kube-system/%s nor kube-system/%s has clusterDNS): "+
			"pods on this node get no cluster DNS (event MissingClusterDNS) and cannot resolve Services.\n"+
			"  Rerun join with --cluster-dns <the kube-dns Service's IP> [--cluster-domain <domain>], or set the chart's clusterDNS.servers (helm upgrade) and rerun join.\n",
			kubeadmKubeletConfigMap, ChartKubeletConfigMap)
		return
	}
	f := log.Fields{"cluster-dns": strings.Join(d.servers, ","), "from": d.serversFrom}
	if d.domain != "" {
		f["cluster-domain"], f["domain-from"] = d.domain, d.domainFrom
	}
	log.WithFields(f).Info("cluster DNS for the node's pods")
}

// explicitDNS is what the user gave: the --cluster-dns and --cluster-domain
// flags, else the same settings given with --hostlet-arg.
func (cfg Config) explicitDNS() (dnsSource, error) {
	s := dnsSource{name: "--cluster-dns/--cluster-domain", domain: cfg.ClusterDomain}
	list := cfg.ClusterDNS
	if v, ok := cfg.ExtraSettings[clusterDNSSetting]; ok && len(list) == 0 {
		list = strings.Split(v, ",")
	}
	if v, ok := cfg.ExtraSettings[clusterDomainSetting]; ok && s.domain == "" {
		s.domain = v
	}
	servers, err := dnsServers(list)
	if err != nil {
		return dnsSource{}, fmt.Errorf("--cluster-dns: %w", err)
	}
	s.servers = servers
	return s, nil
}

// findClusterDNS resolves the node's DNS settings: the user's, then the
// cluster's (read with the bootstrap token only when the user did not give
// both).
func findClusterDNS(ctx context.Context, client kubernetes.Interface, cfg Config) (clusterDNS, error) {
	explicit, err := cfg.explicitDNS()
	if err != nil {
		return clusterDNS{}, err
	}
	if len(explicit.servers) > 0 && explicit.domain != "" {
		return resolveDNS(explicit), nil
	}
	sources := []dnsSource{explicit}
	for _, name := range []string{kubeadmKubeletConfigMap, ChartKubeletConfigMap} {
		s, err := readDNSSource(ctx, client, name)
		if err != nil {
			return clusterDNS{}, err
		}
		sources = append(sources, s)
	}
	return resolveDNS(sources...), nil
}

// readDNSSource reads one kube-system ConfigMap. Missing, not readable by
// the token (a chart from before it granted this) or malformed, it is
// skipped with a note: the join goes on, and says so if no DNS is found.
// Any other failure is the join's: a config written without DNS because
// the API server hiccupped would go unnoticed until pods fail to resolve.
func readDNSSource(ctx context.Context, client kubernetes.Interface, name string) (dnsSource, error) {
	where := metav1.NamespaceSystem + "/" + name
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log.WithField("configmap", where).Debug("no such ConfigMap: no cluster DNS from it")
		return dnsSource{}, nil
	case apierrors.IsForbidden(err):
		log.WithField("configmap", where).Warn("the bootstrap token may not read it (chart value rbac.kubeletConfig): no cluster DNS from it")
		return dnsSource{}, nil
	case err != nil:
		return dnsSource{}, fmt.Errorf("reading %s for the cluster DNS: %w", where, err)
	}
	s, err := parseKubeletConfigMap(cm)
	if err != nil {
		log.WithField("configmap", where).WithError(err).Warn("ignored: no cluster DNS from it")
		return dnsSource{}, nil
	}
	s.name = where
	return s, nil
}

// parseKubeletConfigMap reads clusterDNS and clusterDomain from the
// KubeletConfiguration under the key "kubelet", as kubeadm writes it.
// Other fields are not hostlet's business here and are not checked.
func parseKubeletConfigMap(cm *v1.ConfigMap) (dnsSource, error) {
	data, ok := cm.Data[kubeletConfigKey]
	if !ok {
		return dnsSource{}, fmt.Errorf("no key %q", kubeletConfigKey)
	}
	var kc kubeletconfig.KubeletConfiguration
	if err := yaml.Unmarshal([]byte(data), &kc); err != nil {
		return dnsSource{}, fmt.Errorf("key %q is not a KubeletConfiguration: %w", kubeletConfigKey, err)
	}
	if kc.Kind != "" && kc.Kind != "KubeletConfiguration" {
		return dnsSource{}, fmt.Errorf("key %q is a %s, not a KubeletConfiguration", kubeletConfigKey, kc.Kind)
	}
	servers, err := dnsServers(kc.ClusterDNS)
	if err != nil {
		return dnsSource{}, fmt.Errorf("clusterDNS: %w", err)
	}
	if len(servers) == 0 && kc.ClusterDomain == "" {
		return dnsSource{}, errors.New("it has neither clusterDNS nor clusterDomain")
	}
	return dnsSource{servers: servers, domain: kc.ClusterDomain}, nil
}

// dnsServers are the non-empty entries of list, each an IP address: a
// resolv.conf nameserver takes nothing else.
func dnsServers(list []string) ([]string, error) {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if net.ParseIP(s) == nil {
			return nil, fmt.Errorf("%q is not an IP address", s)
		}
		out = append(out, s)
	}
	return out, nil
}
