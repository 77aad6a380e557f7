package join

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// kubeletCM is a kube-system ConfigMap as kubeadm writes kubelet-config.
func kubeletCM(name, kubelet string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name},
		Data: map[string]string{"kubelet": kubelet}}
}

// kubeadmKubelet is the head of what kubeadm v1.35 writes, with its DNS.
const kubeadmKubelet = `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
kind: KubeletConfiguration
rotateCertificates: true
`

func TestParseKubeletConfigMap(t *testing.T) {
	for _, c := range []struct {
		name, data    string
		servers       []string
		domain, error string
	}{
		{"kubeadm's", kubeadmKubelet, []string{"10.96.0.10"}, "cluster.local", ""},
		{"dual stack", "clusterDNS: [10.96.0.10, 'fd00::a']\nclusterDomain: k8s.example\n", []string{"10.96.0.10", "fd00::a"}, "k8s.example", ""},
		{"domain only", "kind: KubeletConfiguration\nclusterDomain: cluster.local\n", nil, "cluster.local", ""},
		{"no DNS", "kind: KubeletConfiguration\ncgroupDriver: systemd\n", nil, "", "neither clusterDNS nor clusterDomain"},
		{"not an IP", "clusterDNS: [kube-dns]\n", nil, "", `"kube-dns" is not an IP address`},
		{"not YAML", "clusterDNS: [", nil, "", "not a KubeletConfiguration"},
		{"another kind", "kind: KubeProxyConfiguration\nclusterDNS: [10.0.0.1]\n", nil, "", "a KubeProxyConfiguration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := parseKubeletConfigMap(kubeletCM("kubelet-config", c.data))
			if c.error != "" {
				if err == nil || !strings.Contains(err.Error(), c.error) {
					t.Fatalf("want an error saying %q, got %v", c.error, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(s.servers, c.servers) || s.domain != c.domain {
				t.Fatalf("got %v %q %v, want %v %q", s.servers, s.domain, err, c.servers, c.domain)
			}
		})
	}
	if _, err := parseKubeletConfigMap(&v1.ConfigMap{Data: map[string]string{"other": "x"}}); err == nil {
		t.Fatal("a ConfigMap without the kubelet key parsed")
	}
}

// Each setting comes from the first source that has it: the user's flags,
// kubeadm's kubelet-config, the chart's ConfigMap.
func TestFindClusterDNSPrecedence(t *testing.T) {
	kubeadm := kubeletCM("kubelet-config", kubeadmKubelet)
	chart := kubeletCM(ChartKubeletConfigMap, "kind: KubeletConfiguration\nclusterDNS: [10.43.0.10]\nclusterDomain: chart.local\n")
	chartNoDomain := kubeletCM(ChartKubeletConfigMap, "clusterDNS: [10.43.0.10]\n")
	for _, c := range []struct {
		name                string
		cfg                 Config
		objects             []runtime.Object
		servers             []string
		serversFrom, domain string
		domainFrom          string
	}{
		{name: "flags over both", cfg: Config{ClusterDNS: []string{"10.0.0.53"}, ClusterDomain: "flag.local"},
			objects: []runtime.Object{kubeadm, chart}, servers: []string{"10.0.0.53"}, serversFrom: "--cluster-dns/--cluster-domain",
			domain: "flag.local", domainFrom: "--cluster-dns/--cluster-domain"},
		{name: "kubelet-config over the chart's", objects: []runtime.Object{kubeadm, chart},
			servers: []string{"10.96.0.10"}, serversFrom: "kube-system/kubelet-config", domain: "cluster.local", domainFrom: "kube-system/kubelet-config"},
		{name: "the chart's alone", objects: []runtime.Object{chart},
			servers: []string{"10.43.0.10"}, serversFrom: "kube-system/" + ChartKubeletConfigMap, domain: "chart.local", domainFrom: "kube-system/" + ChartKubeletConfigMap},
		{name: "a flag for the domain only", cfg: Config{ClusterDomain: "flag.local"}, objects: []runtime.Object{kubeadm},
			servers: []string{"10.96.0.10"}, serversFrom: "kube-system/kubelet-config", domain: "flag.local", domainFrom: "--cluster-dns/--cluster-domain"},
		{name: "hostlet-arg as a flag", cfg: Config{ExtraSettings: map[string]string{"cluster-dns": "10.0.0.53"}}, objects: []runtime.Object{chart},
			servers: []string{"10.0.0.53"}, serversFrom: "--cluster-dns/--cluster-domain", domain: "chart.local", domainFrom: "kube-system/" + ChartKubeletConfigMap},
		{name: "a source without domain", objects: []runtime.Object{chartNoDomain},
			servers: []string{"10.43.0.10"}, serversFrom: "kube-system/" + ChartKubeletConfigMap},
		{name: "a malformed source is skipped", objects: []runtime.Object{kubeletCM("kubelet-config", "clusterDNS: ["), chart},
			servers: []string{"10.43.0.10"}, serversFrom: "kube-system/" + ChartKubeletConfigMap, domain: "chart.local", domainFrom: "kube-system/" + ChartKubeletConfigMap},
		{name: "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset(c.objects...)
			d, err := findClusterDNS(context.Background(), client, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.servers, c.servers) || d.serversFrom != c.serversFrom || d.domain != c.domain || d.domainFrom != c.domainFrom {
				t.Fatalf("got %+v, want servers %v from %q, domain %q from %q", d, c.servers, c.serversFrom, c.domain, c.domainFrom)
			}
			settings := map[string]any{}
			d.apply(settings)
			if got, ok := settings["clusterDNS"]; ok != (c.servers != nil) || (ok && !reflect.DeepEqual(got, c.servers)) {
				t.Errorf("settings clusterDNS: %v", settings)
			}
			if got, ok := settings["clusterDomain"]; ok != (c.domain != "") || (ok && got != c.domain) {
				t.Errorf("settings clusterDomain: %v", settings)
			}
			var out bytes.Buffer
			d.report(&out)
			if warned := strings.Contains(out.String(), "pods on this node get no cluster DNS"); warned != (c.servers == nil) {
				t.Errorf("warning printed %v with servers %v: %q", warned, c.servers, out.String())
			}
		})
	}
}

// Both flags given: the cluster is not asked.
func TestFindClusterDNSExplicitReadsNothing(t *testing.T) {
	client := fake.NewClientset()
	d, err := findClusterDNS(context.Background(), client, Config{ClusterDNS: []string{"10.0.0.53"}, ClusterDomain: "x.local"})
	if err != nil || d.serversFrom != "--cluster-dns/--cluster-domain" {
		t.Fatalf("%+v %v", d, err)
	}
	if n := len(client.Actions()); n != 0 {
		t.Fatalf("%d API calls: %v", n, client.Actions())
	}
	if _, err := findClusterDNS(context.Background(), client, Config{ClusterDNS: []string{"kube-dns"}}); err == nil || !strings.Contains(err.Error(), "--cluster-dns") {
		t.Fatalf("a name as --cluster-dns: %v", err)
	}
}

// A ConfigMap the token may not read is skipped (a chart from before the
// grant); any other failure fails the join rather than writing no DNS.
func TestFindClusterDNSErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, c := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, "kubelet-config", errors.New("no")), false},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset(kubeletCM(ChartKubeletConfigMap, "clusterDNS: [10.43.0.10]\n"))
			client.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.(k8stesting.GetAction).GetName() == "kubelet-config" {
					return true, nil, c.err
				}
				return false, nil, nil
			})
			d, err := findClusterDNS(context.Background(), client, Config{})
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), "kube-system/kubelet-config") {
					t.Fatalf("want an error naming the ConfigMap, got %v", err)
				}
				return
			}
			if err != nil || d.serversFrom != "kube-system/"+ChartKubeletConfigMap {
				t.Fatalf("%+v %v", d, err)
			}
		})
	}
}
