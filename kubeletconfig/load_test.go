package kubeletconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Strict first: an unknown or duplicate field is named in a warning and the
// rest is read (the kubelet's lenient fallback); anything not a
// KubeletConfiguration is an error.
func TestDecode(t *testing.T) {
	kc, warning, err := Decode([]byte(header + "maxPods: 7\n"))
	if err != nil || warning != "" || kc.MaxPods != 7 {
		t.Fatalf("plain: %v %q %v", kc, warning, err)
	}
	kc, warning, err = Decode([]byte(header + "maxPods: 7\nmaxPodz: 8\n"))
	if err != nil || !strings.Contains(warning, `unknown field "maxPodz"`) || kc.MaxPods != 7 {
		t.Fatalf("unknown field: %v %q %v", kc, warning, err)
	}
	_, warning, err = Decode([]byte(header + "maxPods: 7\nmaxPods: 8\n"))
	if err != nil || !strings.Contains(warning, `"maxPods" already set`) {
		t.Fatalf("duplicate field: %q %v", warning, err)
	}
	for _, bad := range []string{
		"maxPods: 7\n",
		"apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders: []\n",
		header + "maxPods: seven\n",
	} {
		if _, _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// The file's unset fields get the kubelet's defaults (cgroupDriver stays
// empty: containerd's), its relative paths are made absolute against its
// directory, and the hard eviction thresholds are the kubelet's unless it
// has its own (merged with them on mergeDefaultEvictionSettings).
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "kubelet.yaml", header+"tlsCertFile: pki/c.crt\npodLogsDir: /logs\nresolvConf: r.conf\nevictionHard:\n  memory.available: 1Gi\n")
	kc, warnings, err := LoadFile(p)
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	if kc.MaxPods != 110 || kc.Port != 10250 || *kc.KubeAPIQPS != 50 || kc.CgroupDriver != "" || *kc.FailSwapOn != true ||
		kc.NodeStatusReportFrequency.Duration != 5*time.Minute || kc.CrashLoopBackOff.MaxContainerRestartPeriod.Duration != 300*time.Second {
		t.Errorf("defaults: %+v", kc)
	}
	if kc.TLSCertFile != filepath.Join(dir, "pki/c.crt") || *kc.ResolverConfig != filepath.Join(dir, "r.conf") || kc.PodLogsDir != "/logs" {
		t.Errorf("paths: %q %q %q", kc.TLSCertFile, *kc.ResolverConfig, kc.PodLogsDir)
	}
	if !reflect.DeepEqual(kc.EvictionHard, map[string]string{"memory.available": "1Gi"}) {
		t.Errorf("own eviction thresholds: %v", kc.EvictionHard)
	}

	kc, _, err = LoadFile(write(t, dir, "merge.yaml", header+"mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n"))
	if err != nil || len(kc.EvictionHard) != 5 || kc.EvictionHard["memory.available"] != "1Gi" || kc.EvictionHard["imagefs.available"] != "15%" {
		t.Errorf("merged eviction thresholds: %v %v", kc.EvictionHard, err)
	}
	kc, _, err = LoadFile(write(t, dir, "none.yaml", header+"nodeStatusUpdateFrequency: 20s\n"))
	if err != nil || !reflect.DeepEqual(kc.EvictionHard, DefaultEvictionHard) {
		t.Errorf("default eviction thresholds: %v %v", kc.EvictionHard, err)
	}
	// An explicit update frequency is the report frequency too.
	if kc.NodeStatusReportFrequency.Duration != 20*time.Second {
		t.Errorf("report frequency %v", kc.NodeStatusReportFrequency)
	}
	if _, _, err := LoadFile(write(t, dir, "empty.yaml", "")); err == nil || !strings.Contains(err.Error(), "was empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file loaded")
	}
}

// Drop-ins apply in lexical order of their paths (subdirectories too),
// only *.conf, each a merge patch over the configuration so far: a scalar
// replaced, a map merged key by key (null removes one), a list replaced;
// the result defaulted again. One without apiVersion/kind is refused.
func TestMergeDropins(t *testing.T) {
	dir := t.TempDir()
	base, _, err := LoadFile(write(t, dir, "kubelet.yaml", header+"maxPods: 50\nclusterDNS: [10.0.0.10, 10.0.0.11]\n"+
		"systemReserved:\n  cpu: 100m\n  memory: 100Mi\nevictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "kubelet.conf.d")
	write(t, d, "20-b.conf", header+"maxPods: 30\nclusterDNS: [10.0.0.20]\n")
	write(t, d, "10-a.conf", header+"maxPods: 40\nsystemReserved:\n  memory: 200Mi\n  pid: \"100\"\nevictionSoft: null\n")
	write(t, d, "30-sub/1.conf", header+"clusterDomain: sub.local\n")
	write(t, d, "15-ignored.yaml", header+"maxPods: 1\n")
	write(t, d, "25-typo.conf", header+"maxPodz: 2\n")
	warnings, err := MergeDropins(base, d)
	if err != nil {
		t.Fatal(err)
	}
	if base.MaxPods != 30 || !reflect.DeepEqual(base.ClusterDNS, []string{"10.0.0.20"}) || base.ClusterDomain != "sub.local" {
		t.Errorf("merged: maxPods %d, clusterDNS %v, clusterDomain %q", base.MaxPods, base.ClusterDNS, base.ClusterDomain)
	}
	if !reflect.DeepEqual(base.SystemReserved, map[string]string{"cpu": "100m", "memory": "200Mi", "pid": "100"}) {
		t.Errorf("systemReserved merged key by key: %v", base.SystemReserved)
	}
	if base.EvictionSoft != nil || base.EvictionSoftGracePeriod["memory.available"] != "1m" {
		t.Errorf("evictionSoft removed by null: %v %v", base.EvictionSoft, base.EvictionSoftGracePeriod)
	}
	if base.Port != 10250 || ptr.Deref(base.KubeAPIQPS, 0) != 50 {
		t.Errorf("defaults lost: %+v", base)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "25-typo.conf") || !strings.Contains(warnings[0], "maxPodz") {
		t.Errorf("warnings %q", warnings)
	}

	// Over the defaults when there is no --config.
	kc := Defaulted()
	if _, err := MergeDropins(kc, d); err != nil || kc.MaxPods != 30 || kc.SystemReserved["cpu"] != "" {
		t.Errorf("over defaults: %v %+v", err, kc)
	}

	for name, content := range map[string]string{
		"no-kind.conf": "maxPods: 3\n",
		"other.conf":   "apiVersion: v1\nkind: ConfigMap\n",
		"bad.conf":     header + "maxPods: many\n",
	} {
		bad := filepath.Join(t.TempDir(), "d")
		write(t, bad, name, content)
		if _, err := MergeDropins(Defaulted(), bad); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := MergeDropins(Defaulted(), filepath.Join(dir, "missing")); err == nil {
		t.Error("missing dir merged")
	}
}

func TestHasTypeMeta(t *testing.T) {
	for data, want := range map[string]bool{
		header:                  true,
		"kind: Foo\n":           true,
		"max-pods: 10\n":        false,
		"cluster-dns: [a, b]\n": false,
	} {
		if got, err := HasTypeMeta([]byte(data)); err != nil || got != want {
			t.Errorf("%q: %v %v", data, got, err)
		}
	}
}

// The kubelet's feature gates: unknown names and locked gates set the other
// way are the kubelet's errors; dependencies are checked.
func TestFeatureGates(t *testing.T) {
	fg := NewFeatureGate()
	if !fg.Enabled("GracefulNodeShutdown") || fg.Enabled("NodeLogQuery") {
		t.Error("defaults")
	}
	off := map[string]bool{"NodeLogQuery": true, "GracefulNodeShutdown": false, "GracefulNodeShutdownBasedOnPodPriority": false, "WindowsGracefulNodeShutdown": false}
	if err := fg.SetFromMap(off); err != nil || !fg.Enabled("NodeLogQuery") || fg.Enabled("GracefulNodeShutdown") {
		t.Errorf("known gates: %v", err)
	}
	if err := NewFeatureGate().SetFromMap(map[string]bool{"NoSuchGate": true}); err == nil || err.Error() != "unrecognized feature gate: NoSuchGate" {
		t.Errorf("unknown gate: %v", err)
	}
	if err := NewFeatureGate().SetFromMap(map[string]bool{"SidecarContainers": false}); err == nil || !strings.Contains(err.Error(), "locked to true") {
		t.Errorf("locked gate: %v", err)
	}
	if err := NewFeatureGate().SetFromMap(map[string]bool{"GracefulNodeShutdown": false, "GracefulNodeShutdownBasedOnPodPriority": true}); err == nil || !strings.Contains(err.Error(), "depends on") {
		t.Errorf("dependency: %v", err)
	}
}

// Validation speaks the kubelet's messages, against the configuration's
// own gates.
func TestValidate(t *testing.T) {
	valid := Defaulted()
	if err := Validate(valid, NewFeatureGate()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		edit func(*kubeletv1beta1.KubeletConfiguration)
		want string
	}{
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.ImageGCLowThresholdPercent = ptr.To[int32](90) },
			"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration = 10*time.Second, 20*time.Second
		}, "invalid configuration: shutdownGracePeriodCriticalPods {20s} must be <= shutdownGracePeriod {10s}"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ShutdownGracePeriod.Duration = 10 * time.Second
			kc.FeatureGates = map[string]bool{"GracefulNodeShutdown": false, "GracefulNodeShutdownBasedOnPodPriority": false, "WindowsGracefulNodeShutdown": false}
		}, "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.MemorySwap.SwapBehavior = "Unlimited" },
			`invalid configuration: memorySwap.swapBehavior "Unlimited" must be one of: "", "LimitedSwap" or "NoSwap"`},
		{func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CrashLoopBackOff.MaxContainerRestartPeriod.Duration = 10 * time.Minute
		},
			"CrashLoopBackOff.MaxContainerRestartPeriod (got: 600 seconds) must be set between 1s and 300s"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"KubeletCrashLoopBackOffMax": false}
		},
			"FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.PodLogsDir = "var/log/pods" },
			`invalid configuration: pod logs path "var/log/pods" must be absolute path`},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.Port = 70000 },
			"invalid configuration: port (--port) 70000 must be between 1 and 65535, inclusive"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.ContainerLogMaxFiles = ptr.To[int32](1) },
			"invalid configuration: containerLogMaxFiles must be greater than 1"},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.EnforceNodeAllocatable = []string{"pods", "none"} },
			`may not contain additional enforcements when "none" is specified`},
		{func(kc *kubeletv1beta1.KubeletConfiguration) { kc.FeatureGates = map[string]bool{"Bogus": true} },
			"unrecognized feature gate: Bogus"},
	} {
		kc := valid.DeepCopy()
		c.edit(kc)
		if err := Validate(kc, NewFeatureGate()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
