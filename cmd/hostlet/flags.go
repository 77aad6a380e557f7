package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/hostlet/hostlet/kubeletconfig"
	"github.com/hostlet/hostlet/provider/cri"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/runtime"
	"github.com/hostlet/hostlet/stargz"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"sigs.k8s.io/yaml"
)

// options are hostlet's settings, named like the kubelet's flags.
type options struct {
	// controllerAttachDetach is enableControllerAttachDetach: false
	// leaves the node's volumes to the node, which (as the kubelet 1.35)
	// attaches none.
	controllerAttachDetach bool

	kubeconfig        string
	configFile        string
	configDir         string
	featureGates      map[string]bool
	hostnameOverride  string
	nodeIP            string
	externalIP        string
	nodeLabels        map[string]string
	taints            []string
	maxPods           int
	podsPerCore       int32
	providerID        string
	registerNode      bool
	rootDir           string
	runtimeEndpoint   string
	containerdNS      string
	criSocket         string // the CRI view's socket; "": not served
	cniConfDir        string
	cniBinDirs        []string
	cniCacheDir       string
	cniDefaultBridge  string
	registryConfigDir string
	// serializeImagePulls, registryQPS and registryBurst are the kubelet's
	// image puller's (maxParallelImagePulls is in the file only).
	serializeImagePulls        bool
	registryQPS, registryBurst int32
	// imageSnapshotter is --image-snapshotter ("" or "stargz"),
	// stargzCredentials the stargz snapshotter's credentials socket.
	imageSnapshotter, stargzCredentials string
	// credentialProviderConfig and credentialProviderBinDir are the
	// kubelet's flags (no KubeletConfiguration field has them).
	credentialProviderConfig string
	// pullVerificationPolicy and pullVerificationAllowlist are
	// imagePullCredentialsVerificationPolicy and
	// preloadedImagesVerificationAllowlist (o.kubeletConfig has the
	// effective policy, defaulted with its gate).
	pullVerificationPolicy    string
	pullVerificationAllowlist []string
	credentialProviderBinDir  string
	cdiSpecDirs               []string
	address                   string
	port                      int32
	tlsCert, tlsKey           string
	tlsCipherSuites           []string
	tlsMinVersion             string
	seccompDefault            bool
	protectKernelDefaults     bool
	podPidsLimit              int64
	cpuCFSQuota               bool
	cpuCFSQuotaPeriod         time.Duration
	readOnlyPort              int32
	allowedUnsafeSysctls      []string
	rotateServerCerts         bool
	rotateCerts               bool
	clientCA                  string
	anonymousAuth             bool
	tokenWebhook              bool
	authorizationMode         string
	debuggingHandlers         bool
	enableServer              bool
	registryMirror            bool
	authnCacheTTL             time.Duration
	authzAllowedTTL           time.Duration
	authzDeniedTTL            time.Duration
	streamIdleTimeout         time.Duration
	clusterDNS                []string
	clusterDomain             string
	resolvConf                string
	systemReserved            map[string]string
	kubeReserved              map[string]string
	evictionHard              map[string]string
	shutdownGrace             time.Duration
	shutdownCritical          time.Duration
	statusUpdateFreq          time.Duration
	statusReportFreq          time.Duration
	maxImages                 int32
	maxRestartPeriod          time.Duration
	kubeAPIQPS                int32
	kubeAPIBurst              int
	eventQPS, eventBurst      int32
	verbosity                 int
	loggingFormat             string
	testPanicHooks            bool
	profiling                 bool
	healthzPort               int32
	healthzAddress            string
	systemLogHandler          bool
	systemLogQuery            bool
	housekeeping
	evictionFlags
	cgroupFlags
	staticPodFlags
	agentFlags

	// kubeletConfig is the effective configuration (/configz): the file's
	// and the drop-ins', the flags' over them; gates its feature gates.
	kubeletConfig *kubeletv1beta1.KubeletConfiguration
	gates         featuregate.FeatureGate
	// tracer is the tracer provider of kubeletConfig's tracing
	// (startTracing); nil before.
	tracer trace.TracerProvider
	// warnings are what the configuration sets that hostlet ignores, to
	// be logged once logging is set up.
	warnings []string
}

func (o *options) flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("hostlet", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "/etc/hostlet/kubeconfig", "kubeconfig with the node's identity (system:node:<name>)")
	fs.StringVar(&o.configFile, "config", "", "the kubelet's configuration file, a KubeletConfiguration (kubelet.config.k8s.io/v1beta1): its fields set the flags of the same settings, command-line flags win; the fields hostlet does not implement stop it, or are logged as ignored where that is harmless. hostlet's older YAML keyed by flag name is still read (deprecated)")
	fs.StringVar(&o.configDir, "config-dir", "", "directory of KubeletConfiguration drop-ins (*.conf, lexical order) merged over --config as the kubelet's (JSON merge patches); command-line flags win over both")
	fs.Var(cliflag.NewMapStringBool(&o.featureGates), "feature-gates", "the kubelet's feature gates (key=true|false,...): an unknown one is refused, as by the kubelet; those of behaviour hostlet does not have are logged as without effect")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "node name (default: the host name)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "node InternalIP (default: the address of the default route)")
	fs.StringVar(&o.externalIP, "external-ip", "", "node ExternalIP, if any")
	fs.StringToStringVar(&o.nodeLabels, "node-labels", nil, "labels to add when registering the node (key=value,...)")
	fs.StringSliceVar(&o.taints, "register-with-taints", nil, "taints to register the node with (key=value:Effect,...); no-op with --register-node=false")
	fs.BoolVar(&o.registerNode, "register-node", true, "register the node with the API server; false: wait for someone else to create the Node, then write its status, as the kubelet's registerNode")
	fs.BoolVar(&o.controllerAttachDetach, "enable-controller-attach-detach", true, "Enables the Attach/Detach controller to manage attachment/detachment of volumes scheduled to this node, and disables kubelet from executing any attach/detach operations")
	fs.StringVar(&o.providerID, "provider-id", "", "unique identifier of the node in a machine database (a cloud provider's), set as spec.providerID when the node registers")
	fs.IntVar(&o.maxPods, "max-pods", 110, "number of pods this node can run")
	fs.Int32Var(&o.podsPerCore, "pods-per-core", 0, "number of pods per core this node can run, within --max-pods (0: no such limit), as the kubelet's podsPerCore")
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/kubelet", "directory for pod state, volumes and the plugin sockets (the kubelet's, so DaemonSets that mount /var/lib/kubelet/{pods,device-plugins,plugins_registry} work unchanged)")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "containerd endpoint")
	fs.StringVar(&o.containerdNS, "containerd-namespace", "hostlet", "containerd namespace holding hostlet's images and containers")
	fs.StringVar(&o.criSocket, "cri-socket", cri.DefaultSocket, "unix socket serving a CRI view of the node's pods, containers and images to root (crictl --runtime-endpoint unix://<path>); empty: not served")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI network configs")
	fs.StringSliceVar(&o.cniBinDirs, "cni-bin-dir", []string{"/opt/cni/bin", "/usr/lib/cni"}, "CNI plugin directories")
	fs.StringVar(&o.cniCacheDir, "cni-cache-dir", "/var/lib/cni", "CNI result cache")
	fs.StringVar(&o.cniDefaultBridge, "cni-default-bridge", "", "bridge of a default pod network (host-local over the Node's spec.podCIDRs, as containerd's CNI conf template) used while --cni-conf-dir holds no config; empty: wait for a config (e.g. a CNI DaemonSet's)")
	fs.StringVar(&o.registryConfigDir, "registry-config-dir", "", "containerd-style hosts.toml directory per registry")
	fs.BoolVar(&o.serializeImagePulls, "serialize-image-pulls", true, "pull images one at a time, as the kubelet's serializeImagePulls (false: at most the configuration's maxParallelImagePulls at once)")
	fs.Int32Var(&o.registryQPS, "registry-qps", 5, "If > 0, limit registry pull QPS to this value.  If 0, unlimited.")
	fs.Int32Var(&o.registryBurst, "registry-burst", 10, "Maximum size of a bursty pulls, temporarily allows pulls to burst to this number, while still not exceeding registry-qps. Only used if --registry-qps > 0")
	fs.BoolVar(&o.enableServer, "enable-server", true, "serve the kubelet API on --address and --port; false: not at all, as the kubelet's (no logs, exec, port-forward, stats or metrics from the node; the read-only port and --healthz-port still serve)")
	fs.BoolVar(&o.registryMirror, "registry-mirror", false, "node-local registry mirror: serve the content of this node's containerd store, read-only and by digest only, to the other nodes on the kubelet API's /v2/ (mTLS: their client certificates from --client-ca-file, this node's serving certificate, which must be the cluster CA's), and pull content addressed by digest from the other nodes' mirrors first (their InternalIP and kubelet port), the registry as the fallback")
	fs.StringVar(&o.imageSnapshotter, "image-snapshotter", "", "\"stargz\": pull images lazily through `hostlet stargz-snapshotter` (containerd's proxy snapshotter \"stargz\"), eStargz images mounted from the registry and their files fetched on demand, other images pulled whole into it; empty: containerd's overlayfs")
	fs.StringVar(&o.stargzCredentials, "stargz-credentials-socket", stargz.DefaultCredentialsSocket, "the credentials socket of `hostlet stargz-snapshotter` (its --credentials-socket), handed each pull's registry credentials")
	fs.StringVar(&o.credentialProviderConfig, "image-credential-provider-config", "", "path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; non-recursive search), as the kubelet's: its plugins are asked for the pull credentials of the images they match, after the pod's imagePullSecrets")
	fs.StringVar(&o.credentialProviderBinDir, "image-credential-provider-bin-dir", "", "the path to the directory where credential provider plugin binaries are located")
	fs.StringSliceVar(&o.cdiSpecDirs, "cdi-spec-dirs", runtime.DefaultCDISpecDirs, "directories of CDI specs that device names from device plugins resolve against (containerd's cdi_spec_dirs)")
	fs.StringVar(&o.address, "address", "0.0.0.0", "IP to serve the kubelet API on")
	fs.Int32Var(&o.port, "port", 10250, "port of the kubelet API")
	fs.Int32Var(&o.healthzPort, "healthz-port", 10248, "port of the unauthenticated /healthz (0 serves none; the kubelet API serves it too)")
	fs.StringVar(&o.healthzAddress, "healthz-bind-address", "127.0.0.1", "IP to serve /healthz on")
	fs.BoolVar(&o.systemLogHandler, "enable-system-log-handler", true, "serve the node's /var/log on the kubelet API's /logs/ (nodes/log), as the kubelet's enableSystemLogHandler")
	fs.BoolVar(&o.systemLogQuery, "enable-system-log-query", false, "answer node log queries (/logs/?query=<service>, through journalctl), as the kubelet's enableSystemLogQuery; needs the NodeLogQuery feature gate and --enable-system-log-handler")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate of the kubelet API, reloaded when it changes (default: self-signed in <root-dir>/pki)")
	fs.StringVar(&o.tlsKey, "tls-private-key-file", "", "key of the serving certificate")
	fs.StringSliceVar(&o.tlsCipherSuites, "tls-cipher-suites", nil, "cipher suites of the kubelet API up to TLS 1.2 (default: Go's); preferred values: "+strings.Join(cliflag.PreferredTLSCipherNames(), ", "))
	fs.StringVar(&o.tlsMinVersion, "tls-min-version", "", "lowest TLS version of the kubelet API (default VersionTLS12): "+strings.Join(cliflag.TLSPossibleVersions(), ", "))
	fs.BoolVar(&o.seccompDefault, "seccomp-default", false, "run containers that name no seccomp profile with the runtime's default one (RuntimeDefault), as the kubelet's seccompDefault")
	fs.BoolVar(&o.protectKernelDefaults, "protect-kernel-defaults", false, "refuse to start when the kernel's tunables (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.root_max*) differ from the kubelet's defaults, as the kubelet's protectKernelDefaults; hostlet never changes them")
	fs.BoolVar(&o.cpuCFSQuota, "cpu-cfs-quota", true, "enforce CPU limits of containers and pods with CFS quota, as the kubelet's cpuCFSQuota")
	fs.DurationVar(&o.cpuCFSQuotaPeriod, "cpu-cfs-quota-period", 100*time.Millisecond, "the CFS period of CPU limits' quotas (cpu.cfs_period_us), 1ms to 1s; another than 100ms needs the CustomCPUCFSQuotaPeriod feature gate, as the kubelet's cpuCFSQuotaPeriod")
	fs.Int64Var(&o.podPidsLimit, "pod-max-pids", -1, "most processes a pod may hold (its cgroup's pids.max), as the kubelet's podPidsLimit; -1: no limit of the pod's own")
	fs.Int32Var(&o.readOnlyPort, "read-only-port", 0, "port of the kubelet's read-only API on --address: health, the node's pods, stats and metrics over plain HTTP, without authentication (0: not served)")
	fs.StringSliceVar(&o.allowedUnsafeSysctls, "allowed-unsafe-sysctls", nil, "unsafe sysctls or patterns (ending in *) pods may set beside the safe ones, each of a namespace the pod has its own of (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*), as the kubelet's allowedUnsafeSysctls")
	fs.BoolVar(&o.rotateServerCerts, "rotate-server-certificates", false, "request the serving certificate from the cluster (kubernetes.io/kubelet-serving CSRs for the Node's addresses, approved by an approver such as the chart's) and renew it before it expires; --tls-cert-file is served until the first is issued")
	fs.BoolVar(&o.rotateCerts, "rotate-certificates", false, "renew the client certificate of the --kubeconfig (one <prefix>-current.pem file for certificate and key, as `hostlet join` writes it) through kubernetes.io/kube-apiserver-client-kubelet CSRs before it expires")
	fs.StringVar(&o.clientCA, "client-ca-file", "", "CA that signs client certificates of kubelet API callers")
	// The configuration file's defaults, not the kubelet's legacy flag
	// defaults (anonymous, no token review, AlwaysAllow): hostlet is
	// secure without a file too.
	fs.BoolVar(&o.anonymousAuth, "anonymous-auth", false, "authenticate requests to the kubelet API without an identity as system:anonymous (group system:unauthenticated), then authorize them as any other; insecure, as the kubelet's authentication.anonymous.enabled")
	fs.BoolVar(&o.tokenWebhook, "authentication-token-webhook", true, "authenticate bearer tokens of kubelet API callers with TokenReview, as the kubelet's authentication.webhook.enabled")
	fs.StringVar(&o.authorizationMode, "authorization-mode", "Webhook", "authorization of kubelet API requests: Webhook (SubjectAccessReview) or AlwaysAllow (insecure: every authenticated request allowed), as the kubelet's authorization.mode")
	fs.BoolVar(&o.debuggingHandlers, "enable-debugging-handlers", true, "serve the kubelet API's pod logs, exec, attach, port-forward, /configz, the node's /logs/ and profiles; false: 405 'Debug endpoints are disabled.' as the kubelet's enableDebuggingHandlers")
	fs.DurationVar(&o.authnCacheTTL, "authentication-token-webhook-cache-ttl", 2*time.Minute, "how long TokenReview results of the kubelet API's callers are cached")
	fs.DurationVar(&o.authzAllowedTTL, "authorization-webhook-cache-authorized-ttl", 5*time.Minute, "how long allowed SubjectAccessReview results are cached")
	fs.DurationVar(&o.authzDeniedTTL, "authorization-webhook-cache-unauthorized-ttl", 30*time.Second, "how long denied SubjectAccessReview results are cached")
	fs.DurationVar(&o.streamIdleTimeout, "streaming-connection-idle-timeout", 4*time.Hour, "how long an exec, attach or port-forward stream may be idle before it is closed")
	fs.StringSliceVar(&o.clusterDNS, "cluster-dns", nil, "cluster DNS server IPs")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "", "the cluster's DNS domain, as the kubelet's clusterDomain: ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and <domain> before the host's domains, and a pod with a subdomain has the FQDN <hostname>.<subdomain>.<namespace>.svc.<domain>; empty (the kubelet's default): the host's search domains only, FQDNs ending in svc.")
	fs.StringVar(&o.resolvConf, "resolv-conf", "/etc/resolv.conf", "resolver configuration of pods with dnsPolicy Default")
	fs.StringToStringVar(&o.systemReserved, "system-reserved", nil, "resources reserved for the system (cpu=100m,memory=100Mi,...)")
	fs.StringToStringVar(&o.kubeReserved, "kube-reserved", nil, "resources reserved for Kubernetes components")
	o.evictionHard = map[string]string{}
	for k, v := range kubeletconfig.DefaultEvictionHard {
		o.evictionHard[k] = v
	}
	fs.Var(&langleMap{m: &o.evictionHard}, "eviction-hard", "hard eviction thresholds, e.g. memory.available<1Gi,nodefs.available<10% (replaces the defaults)")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace-period", 0, "how long the node delays its shutdown (logind inhibitor) to stop pods; 0 turns graceful node shutdown off")
	fs.DurationVar(&o.shutdownCritical, "shutdown-grace-period-critical-pods", 0, "part of --shutdown-grace-period kept for critical pods")
	fs.DurationVar(&o.statusUpdateFreq, "node-status-update-frequency", 10*time.Second, "how often node status is computed")
	fs.DurationVar(&o.statusReportFreq, "node-status-report-frequency", 5*time.Minute, "how often unchanged node status is written")
	fs.Int32Var(&o.maxImages, "node-status-max-images", node.DefaultMaxImages, "the maximum number of images to report in node.status.images (the largest first); -1: no cap")
	fs.DurationVar(&o.maxRestartPeriod, "max-container-restart-period", 300*time.Second, "longest crash-loop back-off")
	// Configuration-file fields of the kubelet (it has no such flags).
	fs.StringVar(&o.pullVerificationPolicy, "image-pull-credentials-verification-policy", "", "whether a pod must hold the credentials of an image already on the node (KubeletEnsureSecretPulledImages): NeverVerify, NeverVerifyPreloadedImages (the default: images not pulled by the node are every pod's), NeverVerifyAllowlistedImages or AlwaysVerify; the KubeletConfiguration's imagePullCredentialsVerificationPolicy")
	fs.StringSliceVar(&o.pullVerificationAllowlist, "preloaded-images-verification-allowlist", nil, "images (registry/repository, or a prefix ending in /*) never verified under NeverVerifyAllowlistedImages; the KubeletConfiguration's preloadedImagesVerificationAllowlist")
	fs.Int32Var(&o.kubeAPIQPS, "kube-api-qps", 50, "queries per second to the API server")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 100, "burst of queries to the API server")
	fs.Int32Var(&o.eventQPS, "event-qps", 50, "QPS to limit event creations. The number must be >= 0. If 0 will use DefaultQPS: 5.")
	fs.Int32Var(&o.eventBurst, "event-burst", 100, "Maximum size of a bursty event records, temporarily allows event records to burst to this number, while still not exceeding event-qps. The number must be >= 0. If 0 will use DefaultBurst: 10.")
	o.housekeeping.flags(fs)
	o.evictionFlags.flags(fs)
	o.cgroupFlags.flags(fs)
	o.staticPodFlags.flags(fs)
	o.agentFlags.flags(fs)
	fs.IntVarP(&o.verbosity, "v", "v", 2, "log verbosity (0-2 info, 3+ debug)")
	fs.StringVar(&o.loggingFormat, "logging-format", "text", "Sets the log format. Permitted formats: \"json\" (gated by LoggingBetaOptions), \"text\".")
	// Tests only: lets a pod annotation make hostlet panic (testpanic.Annotation).
	// Hidden, and refused in the config file, so a node cannot have it by accident.
	fs.BoolVar(&o.testPanicHooks, "test-panic-hooks", false, "")
	_ = fs.MarkHidden("test-panic-hooks")
	// Benches and debugging: Go profiles on the kubelet API (nodes/proxy),
	// as the kubelet's debugging handlers serve them.
	fs.BoolVar(&o.profiling, "profiling", false, "")
	_ = fs.MarkHidden("profiling")
	return fs
}

// parse reads the command line, then the configuration (--config and
// --config-dir) under it, as the kubelet does.
func (o *options) parse(args []string) error {
	fs := o.flags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unknown command %s", fs.Arg(0))
	}
	if o.imageSnapshotter != "" && o.imageSnapshotter != stargz.Name {
		return fmt.Errorf("--image-snapshotter: %q is not %q or empty", o.imageSnapshotter, stargz.Name)
	}
	cmdline := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { cmdline[f.Name] = true })
	base, err := o.loadConfig(fs)
	if err != nil {
		return err
	}
	return o.resolveKubeletConfig(fs, cmdline, base)
}

// loadConfig is the KubeletConfiguration of --config with the drop-ins of
// --config-dir merged over it (over the kubelet's defaults without
// --config); nil without either, or when --config is hostlet's older
// flag-keyed file, whose settings it sets on the flags.
func (o *options) loadConfig(fs *pflag.FlagSet) (*kubeletv1beta1.KubeletConfiguration, error) {
	var kc *kubeletv1beta1.KubeletConfiguration
	if o.configFile != "" {
		b, err := os.ReadFile(o.configFile)
		if err != nil {
			return nil, fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", o.configFile, err)
		}
		typed, err := kubeletconfig.HasTypeMeta(b)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", o.configFile, err)
		}
		if !typed {
			if o.configDir != "" {
				return nil, fmt.Errorf("--config-dir merges drop-ins over a KubeletConfiguration; %s is hostlet's flag-keyed file", o.configFile)
			}
			return nil, o.parseFlagKeyed(fs, b)
		}
		var warnings []string
		if kc, warnings, err = kubeletconfig.LoadFile(o.configFile); err != nil {
			return nil, err
		}
		o.warnings = append(o.warnings, warnings...)
	}
	if o.configDir != "" {
		if kc == nil {
			kc = kubeletconfig.Defaulted()
		}
		warnings, err := kubeletconfig.MergeDropins(kc, o.configDir)
		if err != nil {
			return nil, err
		}
		o.warnings = append(o.warnings, warnings...)
	}
	return kc, nil
}

// parseFlagKeyed reads hostlet's older config file: settings keyed by flag
// name, each setting a flag the command line did not give. Joined hosts
// from before join wrote a KubeletConfiguration have one; they kept
// renewing their client certificate, which the KubeletConfiguration says
// with rotateCertificates.
func (o *options) parseFlagKeyed(fs *pflag.FlagSet, b []byte) error {
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		return fmt.Errorf("config file %s: %w", o.configFile, err)
	}
	if _, ok := values["rotate-certificates"]; !ok {
		values["rotate-certificates"] = true
	}
	for name, v := range values {
		f := fs.Lookup(name)
		if f == nil || f.Hidden {
			return fmt.Errorf("config file %s: unknown setting %q", o.configFile, name)
		}
		if f.Changed {
			continue
		}
		if err := fs.Set(name, configValue(v)); err != nil {
			return fmt.Errorf("config file %s: %s: %w", o.configFile, name, err)
		}
	}
	o.warnings = append(o.warnings, fmt.Sprintf("config file %s is keyed by flag name, which is deprecated: "+
		"write a KubeletConfiguration (apiVersion: kubelet.config.k8s.io/v1beta1, kind: KubeletConfiguration; "+
		"the flags that are not kubelet configuration fields on the command line), or rerun `hostlet join`, which writes one", o.configFile))
	return nil
}

// langleMap is the kubelet's "key<value,..." map flag (--eviction-hard).
// The first Set replaces the defaults. "key=value" is accepted too, since
// the config file renders maps that way.
type langleMap struct {
	m   *map[string]string
	set bool
}

func (l *langleMap) String() string {
	if l.m == nil {
		return ""
	}
	var parts []string
	for k, v := range *l.m {
		parts = append(parts, k+"<"+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (l *langleMap) Set(value string) error {
	if !l.set {
		*l.m = map[string]string{}
		l.set = true
	}
	for _, part := range strings.Split(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "<")
		if !ok {
			if k, v, ok = strings.Cut(part, "="); !ok {
				return fmt.Errorf("malformed pair, expect string<string: %q", part)
			}
		}
		(*l.m)[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}

func (l *langleMap) Type() string { return "mapStringString" }

// validateNodeLabels rejects what the kubelet rejects: labels in the
// kubernetes.io and k8s.io namespaces a node may not set on itself, and
// malformed keys or values. node.kubernetes.io/instance-type is allowed.
func validateNodeLabels(labels map[string]string) error {
	var unknown, invalid []string
	for k, v := range labels {
		ns, _, _ := strings.Cut(k, "/")
		if !strings.Contains(k, "/") {
			ns = ""
		}
		isK8s := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if isK8s && !kubeletapis.IsKubeletLabel(k) {
			unknown = append(unknown, k)
		}
		for _, e := range validation.IsQualifiedName(k) {
			invalid = append(invalid, fmt.Sprintf("'%s' - %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			invalid = append(invalid, fmt.Sprintf("'%s' - %s", v, e))
		}
	}
	sort.Strings(unknown)
	sort.Strings(invalid)
	if len(unknown) > 0 {
		return fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %v\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (%s) or be in the specifically allowed set (%s)",
			unknown, strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", "))
	}
	if len(invalid) > 0 {
		return fmt.Errorf("invalid node labels: %s", strings.Join(invalid, "; "))
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
