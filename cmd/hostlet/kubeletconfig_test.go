package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const kcHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func writeFile(t *testing.T, dir, name, content string) string {
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

// leafPaths are the JSON paths of every field of t that holds a value (a
// struct's fields are walked into, TypeMeta skipped).
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			if f.Type != reflect.TypeOf(metav1.TypeMeta{}) {
				out = append(out, leafPaths(f.Type, prefix)...) // inline
			}
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if _, marshals := reflect.New(ft).Interface().(json.Marshaler); ft.Kind() == reflect.Struct && !marshals {
			out = append(out, leafPaths(ft, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// Every field of the KubeletConfiguration has exactly one row (itself or a
// struct above it): a new kubelet version's fields cannot be silently
// ignored. Each flag of a row exists.
func TestKubeletFieldsCoverTheType(t *testing.T) {
	rows := map[string]kubeletField{}
	for _, f := range kubeletFields {
		if _, dup := rows[f.path]; dup {
			t.Errorf("%s has two rows", f.path)
		}
		rows[f.path] = f
		if f.use == useFlag && (&options{}).flags().Lookup(f.flag) == nil {
			t.Errorf("%s: no flag --%s", f.path, f.flag)
		}
		if f.use != useFlag && f.reason == "" {
			t.Errorf("%s: no reason (the doc's table says it)", f.path)
		}
	}
	used := map[string]bool{}
	for _, leaf := range leafPaths(reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{}), "") {
		var found []string
		for p := range rows {
			if leaf == p || strings.HasPrefix(leaf, p+".") {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Errorf("field %s: rows %v, want one", leaf, found)
		}
		for _, p := range found {
			used[p] = true
		}
	}
	for p := range rows {
		if !used[p] {
			t.Errorf("row %s names no field", p)
		}
	}
}

func parseArgs(t *testing.T, args ...string) *options {
	t.Helper()
	// The same warnings on a cgroup v1 or v2 machine.
	old := cgroupV1
	cgroupV1 = func() bool { return false }
	defer func() { cgroupV1 = old }()
	var o options
	if err := o.parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return &o
}

// A KubeletConfiguration's fields set the flags of the same settings; the
// command line wins over it, feature gates merging gate by gate; /configz's
// configuration says the result.
func TestKubeletConfigSetsFlags(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "kubelet.yaml", kcHeader+`
address: 10.0.0.5
port: 11250
tlsCertFile: pki/serving.crt
tlsPrivateKeyFile: /etc/pki/serving.key
tlsMinVersion: VersionTLS12
seccompDefault: true
protectKernelDefaults: true
podPidsLimit: 4096
readOnlyPort: 10255
allowedUnsafeSysctls: [kernel.msgmax, "net.core.*"]
nodeLeaseDurationSeconds: 20
podsPerCore: 8
cpuCFSQuota: false
cpuCFSQuotaPeriod: 50ms
providerID: aws:///eu-west-1a/i-0123456789abcdef0
registerNode: false
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]
authentication:
  x509:
    clientCAFile: /etc/pki/ca.crt
  anonymous:
    enabled: true
  webhook:
    enabled: false
    cacheTTL: 30s
authorization:
  mode: AlwaysAllow
enableDebuggingHandlers: false
clusterDNS: [10.96.0.10, 10.96.0.11]
clusterDomain: example.local
resolvConf: /run/systemd/resolve/resolv.conf
cgroupDriver: systemd
cgroupRoot: /hostlet
cgroupsPerQOS: true
maxPods: 42
kubeAPIQPS: 20
kubeAPIBurst: 40
eventRecordQPS: 7
eventBurst: 14
serializeImagePulls: false
maxParallelImagePulls: 3
registryPullQPS: 2
registryBurst: 4
singleProcessOOMKill: true
evictionHard:
  memory.available: 500Mi
evictionSoft:
  memory.available: 1Gi
evictionSoftGracePeriod:
  memory.available: 1m30s
evictionMaxPodGracePeriod: 60
evictionMinimumReclaim:
  imagefs.available: 2Gi
evictionPressureTransitionPeriod: 1m
imageGCHighThresholdPercent: 90
imageGCLowThresholdPercent: 70
imageMinimumGCAge: 5m
imageMaximumGCAge: 24h
containerLogMaxSize: 20Mi
containerLogMaxFiles: 3
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
systemReserved:
  cpu: 100m
kubeReserved:
  memory: 256Mi
failSwapOn: false
memorySwap:
  swapBehavior: LimitedSwap
rotateCertificates: true
serverTLSBootstrap: true
volumeStatsAggPeriod: 2m
nodeStatusUpdateFrequency: 20s
crashLoopBackOff:
  maxContainerRestartPeriod: 1m
registerWithTaints:
- key: dedicated
  value: infra
  effect: NoSchedule
featureGates:
  NodeLogQuery: true
  ContainerStopSignals: true
  CustomCPUCFSQuotaPeriod: true
logging:
  verbosity: 4
containerRuntimeEndpoint: unix:///run/k3s/containerd.sock
podLogsDir: /srv/pods
`)
	o := parseArgs(t, "--config", conf, "--max-pods", "7", "--feature-gates", "NodeLogQuery=false")
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
	check("address", o.address, "10.0.0.5")
	check("port", o.port, int32(11250))
	check("tls-cert-file", o.tlsCert, filepath.Join(dir, "pki/serving.crt"))
	check("tls-private-key-file", o.tlsKey, "/etc/pki/serving.key")
	check("client-ca-file", o.clientCA, "/etc/pki/ca.crt")
	check("authentication-token-webhook-cache-ttl", o.authnCacheTTL, 30*time.Second)
	check("cluster-dns", o.clusterDNS, []string{"10.96.0.10", "10.96.0.11"})
	check("cluster-domain", o.clusterDomain, "example.local")
	check("resolv-conf", o.resolvConf, "/run/systemd/resolve/resolv.conf")
	check("cgroup-driver", o.cgroupDriver, "systemd")
	check("cgroup-root", o.cgroupRoot, "/hostlet")
	check("max-pods (the command line's)", o.maxPods, 7)
	check("kube-api-qps", o.kubeAPIQPS, int32(20))
	check("kube-api-burst", o.kubeAPIBurst, 40)
	check("event-qps", o.eventQPS, int32(7))
	check("event-burst", o.eventBurst, int32(14))
	check("serialize-image-pulls", o.serializeImagePulls, false)
	check("registry-qps", o.registryQPS, int32(2))
	check("registry-burst", o.registryBurst, int32(4))
	check("configz maxParallelImagePulls (file only)", *o.kubeletConfig.MaxParallelImagePulls, int32(3))
	check("configz singleProcessOOMKill (file only)", *o.kubeletConfig.SingleProcessOOMKill, true)
	check("eviction-hard", o.evictionHard, map[string]string{"memory.available": "500Mi"})
	check("eviction-soft", o.evictionSoft, map[string]string{"memory.available": "1Gi"})
	check("eviction-soft-grace-period", o.evictionSoftGrace, map[string]string{"memory.available": "1m30s"})
	check("eviction-max-pod-grace-period", o.evictionMaxGrace, 60)
	check("eviction-minimum-reclaim", o.minimumReclaim, map[string]string{"imagefs.available": "2Gi"})
	check("eviction-pressure-transition-period", o.pressurePeriod, time.Minute)
	check("image-gc-high-threshold", o.imageGCHigh, 90)
	check("image-gc-low-threshold", o.imageGCLow, 70)
	check("image-minimum-gc-age", o.imageMinAge, 5*time.Minute)
	check("image-maximum-gc-age", o.imageMaxAge, 24*time.Hour)
	check("container-log-max-size", o.logMaxSize, "20Mi")
	check("container-log-max-files", o.logMaxFiles, 3)
	check("shutdown-grace-period", o.shutdownGrace, 30*time.Second)
	check("shutdown-grace-period-critical-pods", o.shutdownCritical, 10*time.Second)
	check("system-reserved", o.systemReserved, map[string]string{"cpu": "100m"})
	check("kube-reserved", o.kubeReserved, map[string]string{"memory": "256Mi"})
	check("fail-swap-on", o.failSwapOn, false)
	check("memory-swap-behavior", o.swapBehavior, "LimitedSwap")
	check("rotate-certificates", o.rotateCerts, true)
	check("rotate-server-certificates", o.rotateServerCerts, true)
	check("volume-stats-agg-period", o.volumeStatsPeriod, 2*time.Minute)
	check("node-status-update-frequency", o.statusUpdateFreq, 20*time.Second)
	// An explicit update frequency is the report frequency too.
	check("node-status-report-frequency", o.statusReportFreq, 20*time.Second)
	check("max-container-restart-period", o.maxRestartPeriod, time.Minute)
	check("register-with-taints", o.taints, []string{"dedicated=infra:NoSchedule"})
	check("feature-gates (merged, the command line's win)", o.featureGates, map[string]bool{"NodeLogQuery": false, "ContainerStopSignals": true, "CustomCPUCFSQuotaPeriod": true})
	check("v", o.verbosity, 4)
	check("container-runtime-endpoint", o.runtimeEndpoint, "unix:///run/k3s/containerd.sock")
	check("pod-logs-dir", o.podLogsDir, "/srv/pods")
	check("tls-min-version", o.tlsMinVersion, "VersionTLS12")
	check("seccomp-default", o.seccompDefault, true)
	check("protect-kernel-defaults", o.protectKernelDefaults, true)
	check("pod-max-pids", o.podPidsLimit, int64(4096))
	check("read-only-port", o.readOnlyPort, int32(10255))
	check("pods-per-core", o.podsPerCore, int32(8))
	check("cpu-cfs-quota", o.cpuCFSQuota, false)
	check("cpu-cfs-quota-period", o.cpuCFSQuotaPeriod, 50*time.Millisecond)
	check("anonymous-auth", o.anonymousAuth, true)
	check("authentication-token-webhook", o.tokenWebhook, false)
	check("authorization-mode", o.authorizationMode, "AlwaysAllow")
	check("enable-debugging-handlers", o.debuggingHandlers, false)
	check("provider-id", o.providerID, "aws:///eu-west-1a/i-0123456789abcdef0")
	check("register-node", o.registerNode, false)
	check("allowed-unsafe-sysctls", o.allowedUnsafeSysctls, []string{"kernel.msgmax", "net.core.*"})
	check("tls-cipher-suites", o.tlsCipherSuites, []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
	// Not in the file: the kubelet's defaults.
	check("streaming-connection-idle-timeout", o.streamIdleTimeout, 4*time.Hour)
	check("container-log-max-workers", o.logMaxWorkers, 1)
	check("profiling (enableProfilingHandler's default)", o.profiling, true)
	check("healthz-port (healthzPort's default)", o.healthzPort, int32(10248))
	check("healthz-bind-address", o.healthzAddress, "127.0.0.1")
	check("enable-system-log-handler", o.systemLogHandler, true)
	check("enable-system-log-query", o.systemLogQuery, false)

	kc := o.kubeletConfig
	check("configz maxPods", kc.MaxPods, int32(7))
	check("configz nodeLeaseDurationSeconds (file only)", kc.NodeLeaseDurationSeconds, int32(20))
	check("configz featureGates", kc.FeatureGates, map[string]bool{"NodeLogQuery": false, "ContainerStopSignals": true, "CustomCPUCFSQuotaPeriod": true})
	check("configz tlsCertFile", kc.TLSCertFile, filepath.Join(dir, "pki/serving.crt"))
	check("configz registerWithTaints", len(kc.RegisterWithTaints), 1)
	check("configz kind", kc.Kind, "")
	if b, err := json.Marshal(kc); err != nil || !strings.Contains(string(b), `"maxPods":7`) || !strings.Contains(string(b), `"evictionHard":{"memory.available":"500Mi"}`) {
		t.Errorf("configz JSON: %s %v", b, err)
	}
	if len(o.warnings) != 0 {
		t.Errorf("warnings: %q", o.warnings)
	}
}

// Without --config, the configuration is the kubelet's defaults with the
// flags over them; the flags' defaults are the kubelet's.
func TestKubeletConfigWithoutFile(t *testing.T) {
	o := parseArgs(t, "--max-pods", "12", "--eviction-hard", "memory.available<1Gi")
	kc := o.kubeletConfig
	if kc.MaxPods != 12 || !reflect.DeepEqual(kc.EvictionHard, map[string]string{"memory.available": "1Gi"}) {
		t.Errorf("flags: %d %v", kc.MaxPods, kc.EvictionHard)
	}
	if kc.Port != 10250 || *kc.ImageGCHighThresholdPercent != 85 || kc.NodeStatusReportFrequency.Duration != 5*time.Minute ||
		kc.CrashLoopBackOff.MaxContainerRestartPeriod.Duration != 300*time.Second || kc.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" {
		t.Errorf("defaults: %+v", kc)
	}
	if !o.serializeImagePulls || o.registryQPS != 5 || o.registryBurst != 10 || kc.MaxParallelImagePulls != nil {
		t.Errorf("the image puller's defaults: serialized %v, QPS %d, burst %d, maxParallelImagePulls %v", o.serializeImagePulls, o.registryQPS, o.registryBurst, kc.MaxParallelImagePulls)
	}
	if !o.registerNode || kc.RegisterNode == nil || !*kc.RegisterNode {
		t.Errorf("registerNode's default: %v %v", o.registerNode, kc.RegisterNode)
	}
	// The kubelet API's security: the configuration file's defaults, not
	// the kubelet's legacy flag defaults.
	if o.anonymousAuth || !o.tokenWebhook || o.authorizationMode != "Webhook" || !o.debuggingHandlers ||
		*kc.Authentication.Anonymous.Enabled || !*kc.Authentication.Webhook.Enabled || kc.Authorization.Mode != "Webhook" || !*kc.EnableDebuggingHandlers {
		t.Errorf("kubelet API defaults: anonymous %v, token webhook %v, authorization %q, debugging handlers %v", o.anonymousAuth, o.tokenWebhook, o.authorizationMode, o.debuggingHandlers)
	}
	o = parseArgs(t)
	if len(o.evictionHard) != 5 || o.evictionHard["imagefs.inodesFree"] != "5%" {
		t.Errorf("default eviction thresholds %v", o.evictionHard)
	}
}

// --config-dir's drop-ins go over --config in lexical order; flags over
// both.
func TestKubeletConfigDropins(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "kubelet.yaml", kcHeader+"maxPods: 50\nclusterDomain: file.local\nsystemReserved:\n  cpu: 100m\n")
	d := filepath.Join(dir, "kubelet.conf.d")
	writeFile(t, d, "10-a.conf", kcHeader+"maxPods: 40\nsystemReserved:\n  memory: 100Mi\n")
	writeFile(t, d, "20-b.conf", kcHeader+"maxPods: 30\nclusterDomain: dropin.local\n")
	o := parseArgs(t, "--config", conf, "--config-dir", d, "--cluster-domain", "flag.local")
	if o.maxPods != 30 || o.clusterDomain != "flag.local" || !reflect.DeepEqual(o.systemReserved, map[string]string{"cpu": "100m", "memory": "100Mi"}) {
		t.Errorf("maxPods %d, clusterDomain %q, systemReserved %v", o.maxPods, o.clusterDomain, o.systemReserved)
	}
	if o.kubeletConfig.MaxPods != 30 || o.kubeletConfig.ClusterDomain != "flag.local" {
		t.Errorf("configz: %d %q", o.kubeletConfig.MaxPods, o.kubeletConfig.ClusterDomain)
	}
	// Without --config: over the defaults.
	o = parseArgs(t, "--config-dir", d)
	if o.maxPods != 30 || o.clusterDomain != "dropin.local" {
		t.Errorf("drop-ins alone: %d %q", o.maxPods, o.clusterDomain)
	}
	// Not with hostlet's flag-keyed file.
	legacy := writeFile(t, dir, "legacy.yaml", "max-pods: 3\n")
	var lo options
	if err := lo.parse([]string{"--config", legacy, "--config-dir", d}); err == nil {
		t.Error("drop-ins over a flag-keyed file")
	}
}

// The fields hostlet does not implement: refused all at once by name when
// they would change what the node does, logged as ignored when harmless;
// at the kubelet's default, silent.
func TestKubeletConfigUnimplemented(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "kubelet.yaml", kcHeader+"cpuManagerPolicy: static\ntopologyManagerPolicy: best-effort\nhairpinMode: none\nmaxPods: 20\n")
	var o options
	err := o.parse([]string{"--config", conf})
	if err == nil {
		t.Fatal("refused fields accepted")
	}
	for _, want := range []string{`cpuManagerPolicy: "static"`, `topologyManagerPolicy: "best-effort"`, "has no topology manager"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "hairpinMode") {
		t.Errorf("an ignored field refused: %v", err)
	}

	conf = writeFile(t, dir, "warn.yaml", kcHeader+"hairpinMode: none\nvolumePluginDir: /opt/flex\ncpuManagerPolicy: none\nmaxPodz: 3\n")
	o2 := parseArgs(t, "--config", conf)
	joined := strings.Join(o2.warnings, "\n")
	for _, want := range []string{"ignored: hairpinMode: \"none\"", "ignored: volumePluginDir: \"/opt/flex\"", `unknown field "maxPodz"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q: %q", want, o2.warnings)
		}
	}
	if strings.Contains(joined, "cpuManagerPolicy") {
		t.Errorf("a field at its default warned about: %q", o2.warnings)
	}

	// The static pod fields set their flags; a relative staticPodPath is
	// the configuration file's directory's, as the kubelet resolves it.
	manifests := filepath.Join(dir, "manifests")
	conf = writeFile(t, dir, "static.yaml", kcHeader+`staticPodPath: manifests
staticPodURL: http://127.0.0.1:1/pods
staticPodURLHeader:
  X-Token: [a, b]
fileCheckFrequency: 7s
httpCheckFrequency: 9s
`)
	o3 := parseArgs(t, "--config", conf)
	if o3.podManifestPath != manifests || o3.manifestURL != "http://127.0.0.1:1/pods" || o3.fileCheckFrequency != 7*time.Second ||
		o3.httpCheckFrequency != 9*time.Second || strings.Join(o3.manifestURLHeader["X-Token"], ",") != "a,b" {
		t.Errorf("static pod settings: %+v", o3.staticPodFlags)
	}
	if len(o3.warnings) != 0 {
		t.Errorf("warnings: %q", o3.warnings)
	}
	if got := o3.kubeletConfig.StaticPodURLHeader["X-Token"]; strings.Join(got, ",") != "a,b" {
		t.Errorf("configz staticPodURLHeader %q", got)
	}
}

// A kubeadm node's config.yaml (as kubeadm 1.35 writes it) works
// unchanged.
func TestKubeadmKubeletConfig(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "config.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: `+filepath.Join(dir, "manifests")+`
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`)
	o := parseArgs(t, "--config", conf)
	if o.clientCA != "/etc/kubernetes/pki/ca.crt" || o.cgroupDriver != "systemd" || !o.rotateCerts || o.clusterDomain != "cluster.local" ||
		o.runtimeEndpoint != "unix:///run/containerd/containerd.sock" || o.statusReportFreq != 5*time.Minute {
		t.Errorf("settings: %+v", o)
	}
	// Nothing is ignored; the static pod directory is watched.
	if len(o.warnings) != 0 || o.podManifestPath != filepath.Join(dir, "manifests") || o.fileCheckFrequency != 20*time.Second {
		t.Errorf("warnings %q, static pods %+v", o.warnings, o.staticPodFlags)
	}
}

// An unknown feature gate is refused as by the kubelet, from the command
// line or the file; a known one hostlet does not act on is logged.
func TestFeatureGatesFlag(t *testing.T) {
	var o options
	if err := o.parse([]string{"--feature-gates", "NoSuchGate=true"}); err == nil || !strings.Contains(err.Error(), "unrecognized feature gate: NoSuchGate") {
		t.Errorf("unknown gate: %v", err)
	}
	conf := writeFile(t, t.TempDir(), "k.yaml", kcHeader+"featureGates:\n  Bogus: true\n")
	o = options{}
	if err := o.parse([]string{"--config", conf}); err == nil || !strings.Contains(err.Error(), "unrecognized feature gate: Bogus") {
		t.Errorf("unknown gate in the file: %v", err)
	}
	p := parseArgs(t, "--feature-gates", "MemoryQoS=true,UserNamespacesSupport=false,ProcMountType=false,ContainerStopSignals=true,NodeLogQuery=false")
	joined := strings.Join(p.warnings, "\n")
	if !strings.Contains(joined, "MemoryQoS=true has no effect") || !strings.Contains(joined, "UserNamespacesSupport=false has no effect") ||
		strings.Contains(joined, "ContainerStopSignals") || strings.Contains(joined, "NodeLogQuery") {
		t.Errorf("gate warnings %q", p.warnings)
	}
	if !p.gates.Enabled("MemoryQoS") {
		t.Error("gate not set")
	}
	// A gate the configuration's validation follows.
	o = options{}
	if err := o.parse([]string{"--shutdown-grace-period", "30s", "--feature-gates",
		"GracefulNodeShutdown=false,GracefulNodeShutdownBasedOnPodPriority=false,WindowsGracefulNodeShutdown=false"}); err == nil ||
		!strings.Contains(err.Error(), "requires feature gate GracefulNodeShutdown") {
		t.Errorf("gated shutdown: %v", err)
	}
}

// failCgroupV1 (true by default) is noted on a cgroup v1 host when a
// configuration file says it; hostlet runs there.
func TestFailCgroupV1(t *testing.T) {
	old := cgroupV1
	cgroupV1 = func() bool { return true }
	defer func() { cgroupV1 = old }()
	var o options
	if err := o.parse(nil); err != nil || len(o.warnings) != 0 {
		t.Errorf("without a file: %v %q", err, o.warnings)
	}
	conf := writeFile(t, t.TempDir(), "k.yaml", kcHeader)
	o = options{}
	if err := o.parse([]string{"--config", conf}); err != nil || len(o.warnings) != 1 || !strings.Contains(o.warnings[0], "failCgroupV1") {
		t.Errorf("with a file: %v %q", err, o.warnings)
	}
	conf = writeFile(t, t.TempDir(), "k.yaml", kcHeader+"failCgroupV1: false\n")
	o = options{}
	if err := o.parse([]string{"--config", conf}); err != nil || len(o.warnings) != 0 {
		t.Errorf("false: %v %q", err, o.warnings)
	}
}

// hostlet's older flag-keyed file still works, with a deprecation note,
// and keeps renewing the client certificate as it did.
func TestFlagKeyedConfigDeprecated(t *testing.T) {
	conf := writeFile(t, t.TempDir(), "config.yaml", "max-pods: 9\ncluster-dns: [10.0.0.1]\n")
	o := parseArgs(t, "--config", conf)
	if o.maxPods != 9 || !reflect.DeepEqual(o.clusterDNS, []string{"10.0.0.1"}) || !o.rotateCerts {
		t.Errorf("settings: %d %v %v", o.maxPods, o.clusterDNS, o.rotateCerts)
	}
	if len(o.warnings) != 1 || !strings.Contains(o.warnings[0], "deprecated") || !strings.Contains(o.warnings[0], "KubeletConfiguration") {
		t.Errorf("warnings %q", o.warnings)
	}
	if o.kubeletConfig.MaxPods != 9 {
		t.Errorf("configz maxPods %d", o.kubeletConfig.MaxPods)
	}
}

// The healthz port and the node log query are the configuration's, the
// query refused without its gate as by the kubelet.
func TestKubeletConfigHealthzAndLogQuery(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "k.yaml", kcHeader+"healthzPort: 10249\nhealthzBindAddress: 0.0.0.0\nenableSystemLogQuery: true\nfeatureGates:\n  NodeLogQuery: true\n")
	o := parseArgs(t, "--config", conf)
	if o.healthzPort != 10249 || o.healthzAddress != "0.0.0.0" || !o.systemLogQuery || !o.systemLogHandler || !o.gates.Enabled("NodeLogQuery") {
		t.Errorf("healthz %s:%d, log handler %v query %v gate %v", o.healthzAddress, o.healthzPort, o.systemLogHandler, o.systemLogQuery, o.gates.Enabled("NodeLogQuery"))
	}
	for _, w := range o.warnings {
		if strings.Contains(w, "NodeLogQuery") || strings.Contains(w, "healthz") {
			t.Errorf("warned: %s", w)
		}
	}
	var p options
	err := p.parse([]string{"--config", writeFile(t, dir, "nogate.yaml", kcHeader+"enableSystemLogQuery: true\n")})
	if err == nil || !strings.Contains(err.Error(), "NodeLogQuery feature gate is required for enableSystemLogQuery") {
		t.Errorf("query without its gate: %v", err)
	}
}

// imagePullCredentialsVerificationPolicy: defaulted with its gate, from the
// file or the flag; refused with the gate off, as the kubelet's validation.
func TestPullCredentialsVerificationPolicy(t *testing.T) {
	if got := parseArgs(t).kubeletConfig.ImagePullCredentialsVerificationPolicy; got != kubeletv1beta1.NeverVerifyPreloadedImages {
		t.Errorf("default %q", got)
	}
	if got := parseArgs(t, "--feature-gates", "KubeletEnsureSecretPulledImages=false").kubeletConfig.ImagePullCredentialsVerificationPolicy; got != "" {
		t.Errorf("gate off: %q", got)
	}
	dir := t.TempDir()
	conf := writeFile(t, dir, "kubelet.yaml", kcHeader+"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"reg.io/team/*\"]\n")
	o := parseArgs(t, "--config", conf)
	if o.kubeletConfig.ImagePullCredentialsVerificationPolicy != kubeletv1beta1.NeverVerifyAllowlistedImages ||
		!reflect.DeepEqual(o.kubeletConfig.PreloadedImagesVerificationAllowlist, []string{"reg.io/team/*"}) || o.pullVerificationPolicy != "NeverVerifyAllowlistedImages" {
		t.Errorf("from the file: %q %q", o.kubeletConfig.ImagePullCredentialsVerificationPolicy, o.kubeletConfig.PreloadedImagesVerificationAllowlist)
	}
	if got := parseArgs(t, "--image-pull-credentials-verification-policy", "AlwaysVerify").kubeletConfig.ImagePullCredentialsVerificationPolicy; got != kubeletv1beta1.AlwaysVerify {
		t.Errorf("flag: %q", got)
	}
	for _, args := range [][]string{
		{"--image-pull-credentials-verification-policy", "Sometimes"},
		{"--image-pull-credentials-verification-policy", "AlwaysVerify", "--feature-gates", "KubeletEnsureSecretPulledImages=false"},
		{"--preloaded-images-verification-allowlist", "reg.io/*"},
		{"--image-pull-credentials-verification-policy", "NeverVerifyAllowlistedImages", "--preloaded-images-verification-allowlist", "reg.io/app:1.0"},
	} {
		var o options
		if err := o.parse(args); err == nil {
			t.Errorf("%q accepted", args)
		} else {
			t.Logf("%q: %v", args, err)
		}
	}
}

// logging.format as the kubelet takes it: json (LoggingBetaOptions, on by
// default) writes one JSON object a line with the kubelet's keys; another
// format is refused with the kubelet's message.
func TestLoggingFormat(t *testing.T) {
	dir := t.TempDir()
	o := parseArgs(t, "--config", writeFile(t, dir, "json.yaml", kcHeader+"logging:\n  format: json\n"))
	if o.loggingFormat != "json" || o.kubeletConfig.Logging.Format != "json" {
		t.Fatalf("logging format %q, configz %q", o.loggingFormat, o.kubeletConfig.Logging.Format)
	}
	var o2 options
	err := o2.parse([]string{"--config", writeFile(t, dir, "xml.yaml", kcHeader+"logging:\n  format: xml\n")})
	if err == nil || !strings.Contains(err.Error(), `logging.format: Invalid value: "xml": Unsupported log format`) {
		t.Errorf("xml: %v", err)
	}

	var buf strings.Builder
	oldOut, oldFormatter, oldKey := log.StandardLogger().Out, log.StandardLogger().Formatter, log.ErrorKey
	defer func() { log.SetOutput(oldOut); log.SetFormatter(oldFormatter); log.ErrorKey = oldKey }()
	log.SetOutput(&buf)
	setLogFormat(o.loggingFormat)
	log.WithError(errors.New("boom")).WithField("pod", "ns/p").Warn("pull failed")
	var line map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &line); err != nil {
		t.Fatalf("not JSON: %q: %v", buf.String(), err)
	}
	if line["msg"] != "pull failed" || line["err"] != "boom" || line["pod"] != "ns/p" || line["ts"] == nil {
		t.Errorf("JSON line %q: want the kubelet's msg, err and ts keys", buf.String())
	}
}

// imageServiceEndpoint is taken when it is containerRuntimeEndpoint's
// socket (however written), refused naming both otherwise.
func TestImageServiceEndpoint(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		image  string
		refuse bool
	}{
		{"unix:///run/containerd/containerd.sock", false},
		{"/run/containerd/containerd.sock", false},
		{"unix:///run/containerd//containerd.sock", false},
		{"unix:///run/stargz.sock", true},
	} {
		conf := writeFile(t, dir, "k.yaml", kcHeader+"containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: "+tc.image+"\n")
		var o options
		err := o.parse([]string{"--config", conf})
		if tc.refuse != (err != nil) {
			t.Errorf("%s: %v", tc.image, err)
		}
		if err != nil && !strings.Contains(err.Error(), `imageServiceEndpoint: "unix:///run/stargz.sock" (hostlet pulls images into the containerd of containerRuntimeEndpoint "unix:///run/containerd/containerd.sock"`) {
			t.Errorf("refusal: %v", err)
		}
	}
}

// The node container manager's fields set their flags; systemCgroups
// without cgroupRoot is refused with the kubelet's message.
func TestNodeAllocatableFields(t *testing.T) {
	dir := t.TempDir()
	conf := writeFile(t, dir, "k.yaml", kcHeader+`enforceNodeAllocatable: [pods, kube-reserved, system-reserved-compressible]
kubeReservedCgroup: /kube.slice
systemReservedCgroup: system.slice
kubeletCgroups: /system.slice/kubelet.service
systemCgroups: /system.slice
cgroupRoot: /
`)
	o := parseArgs(t, "--config", conf)
	if strings.Join(o.enforceNodeAllocatable, ",") != "pods,kube-reserved,system-reserved-compressible" || o.kubeReservedCgroup != "/kube.slice" ||
		o.systemReservedCgroup != "system.slice" || o.kubeletCgroups != "/system.slice/kubelet.service" || o.systemCgroups != "/system.slice" {
		t.Errorf("flags %+v", o.cgroupFlags)
	}
	if len(o.warnings) != 0 {
		t.Errorf("warnings %q", o.warnings)
	}
	conf = writeFile(t, dir, "none.yaml", kcHeader+"enforceNodeAllocatable: []\n")
	if o := parseArgs(t, "--config", conf); len(o.enforceNodeAllocatable) != 0 || len(o.kubeletConfig.EnforceNodeAllocatable) != 0 {
		t.Errorf("an empty enforceNodeAllocatable: %q", o.enforceNodeAllocatable)
	}
	var o2 options
	err := o2.parse([]string{"--system-cgroups", "/system.slice", "--cgroup-root", ""})
	if err == nil || !strings.Contains(err.Error(), "systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified") {
		t.Errorf("systemCgroups without cgroupRoot: %v", err)
	}
}

// shutdownGracePeriodByPodPriority reaches the shutdown manager with its
// gate (on by default); with the gate off it is refused with the kubelet's
// message, and beside shutdownGracePeriod too.
func TestShutdownGracePeriodByPodPriority(t *testing.T) {
	dir := t.TempDir()
	bands := "shutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 20\n- priority: 100000\n  shutdownGracePeriodSeconds: 5\n"
	o := parseArgs(t, "--config", writeFile(t, dir, "k.yaml", kcHeader+bands))
	got := o.shutdownConfig().ByPodPriority
	if len(got) != 2 || got[0].Priority != 0 || got[0].GracePeriod != 20*time.Second || got[1].Priority != 100000 || got[1].GracePeriod != 5*time.Second {
		t.Errorf("bands %+v", got)
	}
	var o2 options
	err := o2.parse([]string{"--config", writeFile(t, dir, "off.yaml", kcHeader+bands+"featureGates:\n  GracefulNodeShutdownBasedOnPodPriority: false\n")})
	if err == nil || !strings.Contains(err.Error(), "Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority") {
		t.Errorf("gate off: %v", err)
	}
	var o3 options
	if err := o3.parse([]string{"--config", writeFile(t, dir, "both.yaml", kcHeader+bands+"shutdownGracePeriod: 30s\n")}); err == nil {
		t.Error("shutdownGracePeriodByPodPriority with shutdownGracePeriod accepted")
	}
}

// localStorageCapacityIsolation: false reaches the node and the eviction
// manager.
func TestLocalStorageCapacityIsolationField(t *testing.T) {
	o := parseArgs(t, "--config", writeFile(t, t.TempDir(), "k.yaml", kcHeader+"localStorageCapacityIsolation: false\n"))
	if o.localStorageIsolation || o.kubeletConfig.LocalStorageCapacityIsolation == nil || *o.kubeletConfig.LocalStorageCapacityIsolation || len(o.warnings) != 0 {
		t.Errorf("isolation %v, configz %v, warnings %q", o.localStorageIsolation, o.kubeletConfig.LocalStorageCapacityIsolation, o.warnings)
	}
	if o := parseArgs(t); !o.localStorageIsolation {
		t.Error("isolation off by default")
	}
}

// userNamespaces.idsPerPod is taken from the file, no longer refused.
func TestUserNamespacesIDsPerPodField(t *testing.T) {
	o := parseArgs(t, "--config", writeFile(t, t.TempDir(), "k.yaml", kcHeader+"userNamespaces:\n  idsPerPod: 131072\n"))
	if o.idsPerPod() != 131072 || len(o.warnings) != 0 {
		t.Errorf("idsPerPod %d, warnings %q", o.idsPerPod(), o.warnings)
	}
}

// qosReserved as the kubelet takes it: parsed (a bad value refused with
// its message), without effect and said so without the QOSReserved gate;
// with it (from the file or --qos-reserved) the QoS memory limits come
// from the capacity less both reservations.
func TestQOSReserved(t *testing.T) {
	dir := t.TempDir()
	o := parseArgs(t, "--config", writeFile(t, dir, "k.yaml", kcHeader+"qosReserved:\n  memory: 50%\n"))
	if w := strings.Join(o.warnings, "\n"); !strings.Contains(w, `ignored: qosReserved: {"memory":"50%"}: without the QOSReserved feature gate it has no effect`) {
		t.Errorf("warnings %q", o.warnings)
	}
	if o.qosReserve(v1.ResourceList{v1.ResourceMemory: resource.MustParse("10Gi")}, nil, nil, nil) != nil {
		t.Error("QoS memory limits without the gate")
	}
	for _, tc := range []struct{ config, want string }{
		{"qosReserved:\n  cpu: 50%\n", `cannot reserve "cpu" resource`},
		{"qosReserved:\n  memory: \"150%\"\n", "percentage must be between 0 and 100"},
	} {
		var o options
		err := o.parse([]string{"--config", writeFile(t, dir, "k.yaml", kcHeader+tc.config)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.config, err, tc.want)
		}
	}
	gated := kcHeader + "featureGates:\n  QOSReserved: true\n"
	for _, args := range [][]string{
		{"--config", writeFile(t, dir, "k.yaml", gated+"qosReserved:\n  memory: 50%\n")},
		{"--config", writeFile(t, dir, "g.yaml", gated), "--qos-reserved", "memory=50%"},
	} {
		o := parseArgs(t, args...)
		if len(o.warnings) != 0 {
			t.Errorf("%q: warnings %q", args, o.warnings)
		}
		if got := o.kubeletConfig.QOSReserved["memory"]; got != "50%" {
			t.Errorf("%q: /configz's qosReserved %q", args, got)
		}
		gi := resource.MustParse("1Gi")
		q := o.qosReserve(v1.ResourceList{v1.ResourceMemory: resource.MustParse("10Gi")}, v1.ResourceList{v1.ResourceMemory: gi}, v1.ResourceList{v1.ResourceMemory: gi}, nil)
		if q == nil || q.Percent != 50 || q.Allocatable != 8<<30 {
			t.Errorf("%q: %+v", args, q)
		}
	}
}

// enableServer: false sets its flag, and is refused beside the registry
// mirror, whose only door is the kubelet API.
func TestEnableServerField(t *testing.T) {
	dir := t.TempDir()
	o := parseArgs(t, "--config", writeFile(t, dir, "k.yaml", kcHeader+"enableServer: false\n"))
	if o.enableServer || len(o.warnings) != 0 {
		t.Errorf("enableServer %v, warnings %q", o.enableServer, o.warnings)
	}
	o.registryMirror = true
	o.hostnameOverride, o.nodeIP = "n", "127.0.0.1"
	if _, err := o.settings(); err == nil || !strings.Contains(err.Error(), "--registry-mirror") {
		t.Errorf("with the mirror: %v", err)
	}
}

// The node agent's own settings set their flags as the kubelet's do, with
// the kubelet's defaults without a file; a syncFrequency of 0 stops hostlet
// as it stops the kubelet.
func TestAgentFields(t *testing.T) {
	o := parseArgs(t)
	if o.oomScoreAdj != -999 || o.maxOpenFiles != 1000000 || o.contentType != "application/vnd.kubernetes.protobuf" ||
		o.contentionProfiling || o.syncFrequency != time.Minute {
		t.Errorf("defaults: %+v", o.agentFlags)
	}
	dir := t.TempDir()
	conf := writeFile(t, dir, "kubelet.yaml", kcHeader+"syncFrequency: 30s\noomScoreAdj: -500\nmaxOpenFiles: 4096\ncontentType: application/json\nenableContentionProfiling: true\npodCIDR: 10.244.7.0/24\n")
	o = parseArgs(t, "--config", conf)
	if o.oomScoreAdj != -500 || o.maxOpenFiles != 4096 || o.contentType != "application/json" || !o.contentionProfiling || o.syncFrequency != 30*time.Second ||
		o.podCIDR != "10.244.7.0/24" {
		t.Errorf("from the file: %+v", o.agentFlags)
	}
	if len(o.warnings) != 0 {
		t.Errorf("warnings: %q", o.warnings)
	}
	if *o.kubeletConfig.OOMScoreAdj != -500 || o.kubeletConfig.SyncFrequency.Duration != 30*time.Second {
		t.Errorf("configz: oomScoreAdj %d, syncFrequency %v", *o.kubeletConfig.OOMScoreAdj, o.kubeletConfig.SyncFrequency)
	}
	var o2 options
	err := o2.parse([]string{"--sync-frequency", "0s"})
	if err == nil || !strings.Contains(err.Error(), "invalid sync frequency 0") {
		t.Errorf("syncFrequency 0: %v", err)
	}
}

// As the kubelet's setContentTypeForClient: protobuf accepts JSON too,
// another type is left to client-go's defaulting.
func TestSetContentType(t *testing.T) {
	var cfg rest.Config
	setContentType(&cfg, "application/vnd.kubernetes.protobuf")
	if cfg.ContentType != "application/vnd.kubernetes.protobuf" || cfg.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("protobuf: %q %q", cfg.ContentType, cfg.AcceptContentTypes)
	}
	cfg = rest.Config{}
	setContentType(&cfg, "application/json")
	if cfg.ContentType != "application/json" || cfg.AcceptContentTypes != "" {
		t.Errorf("json: %q %q", cfg.ContentType, cfg.AcceptContentTypes)
	}
}

// docs/configuration.md lists every field with what hostlet does: its
// table is fieldsDoc's (HOSTLET_UPDATE_DOCS=1 rewrites it), and every
// leaf of the v1beta1 type is under a row (TestKubeletFieldsCoverTheType).
func TestKubeletFieldsDoc(t *testing.T) {
	const path = "../../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, fieldsDocBegin), strings.Index(doc, fieldsDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between %q and %q", path, fieldsDocBegin, fieldsDocEnd)
	}
	want := doc[:i] + fieldsDocBegin + "\n" + fieldsDoc() + doc[j:]
	if want == doc {
		return
	}
	if os.Getenv("HOSTLET_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table of fields is not kubeletFields'; rerun with HOSTLET_UPDATE_DOCS=1", path)
}

// podCIDR is the runtime's until the Node has its own; none without it.
func TestStartPodCIDRs(t *testing.T) {
	if got := startPodCIDRs(""); got != nil {
		t.Errorf("none: %q", got)
	}
	if got := strings.Join(startPodCIDRs("10.244.7.0/24,fd00:7::/64"), " "); got != "10.244.7.0/24 fd00:7::/64" {
		t.Errorf("dual-stack: %q", got)
	}
}
