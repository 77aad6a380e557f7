package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostlet/hostlet/kubeletconfig"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// fieldUse is what hostlet does with one field of a KubeletConfiguration.
type fieldUse int

const (
	// useFlag: the field is the setting of the flag of the same name as the
	// kubelet's (a flag on the command line wins over it).
	useFlag fieldUse = iota
	// useLoad: taken into account while the file is loaded.
	useLoad
	// useFile: implemented, set in the file only (the kubelet has no flag
	// for it either); read from the effective configuration.
	useFile
	// useRefuse: hostlet does not implement it; a value other than the
	// kubelet's default stops hostlet at start, naming the field.
	useRefuse
	// useWarn: hostlet does not implement it, and ignoring it is harmless
	// (it tunes the kubelet's own internals, or concerns what hostlet does
	// not have at all); a value other than the default is logged as
	// ignored at start.
	useWarn
	// useCheck: check decides from the value and the host.
	useCheck
)

// kubeletField is one row of kubeletFields.
type kubeletField struct {
	path string // JSON path in the KubeletConfiguration, dot-separated
	use  fieldUse
	flag string // useFlag: hostlet's flag
	// reason is, for useRefuse and useWarn, what hostlet does instead
	// (logged as "hostlet <reason>"); for useLoad, useFile and useCheck
	// what it does with the field. docs/configuration.md's table of every
	// field is made from them (TestKubeletFieldsDoc).
	reason string
	// check (useCheck) returns a warning to log or a refusal; fromFile
	// says whether a configuration file or drop-in was read.
	check func(kc *kubeletv1beta1.KubeletConfiguration, fromFile bool) (warning, refusal string)
}

func flagged(path, flag string) kubeletField {
	return kubeletField{path: path, use: useFlag, flag: flag}
}
func refuse(path, reason string) kubeletField {
	return kubeletField{path: path, use: useRefuse, reason: reason}
}
func ignore(path, reason string) kubeletField {
	return kubeletField{path: path, use: useWarn, reason: reason}
}

// kubeletFields is every field of the KubeletConfiguration (v1beta1, as of
// the kubelet 1.35) and what hostlet does with it: never silently
// ignored. TestKubeletFieldsCoverTheType keeps it complete.
var kubeletFields = []kubeletField{
	// Implemented: the flag of the same setting.
	flagged("podLogsDir", "pod-logs-dir"),
	flagged("address", "address"),
	flagged("port", "port"),
	flagged("tlsCertFile", "tls-cert-file"),
	flagged("tlsPrivateKeyFile", "tls-private-key-file"),
	flagged("tlsCipherSuites", "tls-cipher-suites"),
	flagged("tlsMinVersion", "tls-min-version"),
	flagged("seccompDefault", "seccomp-default"),
	flagged("protectKernelDefaults", "protect-kernel-defaults"),
	flagged("podPidsLimit", "pod-max-pids"),
	flagged("cpuCFSQuota", "cpu-cfs-quota"),
	flagged("cpuCFSQuotaPeriod", "cpu-cfs-quota-period"),
	flagged("readOnlyPort", "read-only-port"),
	flagged("allowedUnsafeSysctls", "allowed-unsafe-sysctls"),
	flagged("rotateCertificates", "rotate-certificates"),
	flagged("serverTLSBootstrap", "rotate-server-certificates"),
	flagged("authentication.x509.clientCAFile", "client-ca-file"),
	flagged("authentication.anonymous.enabled", "anonymous-auth"),
	flagged("authentication.webhook.enabled", "authentication-token-webhook"),
	flagged("authorization.mode", "authorization-mode"),
	flagged("enableDebuggingHandlers", "enable-debugging-handlers"),
	flagged("enableServer", "enable-server"),
	flagged("authentication.webhook.cacheTTL", "authentication-token-webhook-cache-ttl"),
	flagged("authorization.webhook.cacheAuthorizedTTL", "authorization-webhook-cache-authorized-ttl"),
	flagged("authorization.webhook.cacheUnauthorizedTTL", "authorization-webhook-cache-unauthorized-ttl"),
	flagged("enableProfilingHandler", "profiling"),
	flagged("healthzPort", "healthz-port"),
	flagged("healthzBindAddress", "healthz-bind-address"),
	flagged("enableSystemLogHandler", "enable-system-log-handler"),
	flagged("enableSystemLogQuery", "enable-system-log-query"),
	flagged("clusterDomain", "cluster-domain"),
	flagged("clusterDNS", "cluster-dns"),
	flagged("resolvConf", "resolv-conf"),
	flagged("streamingConnectionIdleTimeout", "streaming-connection-idle-timeout"),
	flagged("nodeStatusUpdateFrequency", "node-status-update-frequency"),
	flagged("nodeStatusReportFrequency", "node-status-report-frequency"),
	flagged("nodeStatusMaxImages", "node-status-max-images"),
	flagged("imageMinimumGCAge", "image-minimum-gc-age"),
	flagged("imageMaximumGCAge", "image-maximum-gc-age"),
	flagged("imageGCHighThresholdPercent", "image-gc-high-threshold"),
	flagged("imageGCLowThresholdPercent", "image-gc-low-threshold"),
	flagged("volumeStatsAggPeriod", "volume-stats-agg-period"),
	flagged("localStorageCapacityIsolation", "local-storage-capacity-isolation"),
	flagged("cgroupRoot", "cgroup-root"),
	flagged("cgroupsPerQOS", "cgroups-per-qos"),
	flagged("cgroupDriver", "cgroup-driver"),
	flagged("maxPods", "max-pods"),
	flagged("podsPerCore", "pods-per-core"),
	flagged("kubeAPIQPS", "kube-api-qps"),
	flagged("kubeAPIBurst", "kube-api-burst"),
	flagged("eventRecordQPS", "event-qps"),
	flagged("eventBurst", "event-burst"),
	flagged("serializeImagePulls", "serialize-image-pulls"),
	flagged("registryPullQPS", "registry-qps"),
	flagged("registryBurst", "registry-burst"),
	flagged("evictionHard", "eviction-hard"),
	flagged("evictionSoft", "eviction-soft"),
	flagged("evictionSoftGracePeriod", "eviction-soft-grace-period"),
	flagged("evictionPressureTransitionPeriod", "eviction-pressure-transition-period"),
	flagged("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period"),
	flagged("evictionMinimumReclaim", "eviction-minimum-reclaim"),
	flagged("featureGates", "feature-gates"),
	flagged("failSwapOn", "fail-swap-on"),
	flagged("memorySwap.swapBehavior", "memory-swap-behavior"),
	flagged("containerLogMaxSize", "container-log-max-size"),
	flagged("containerLogMaxFiles", "container-log-max-files"),
	flagged("containerLogMaxWorkers", "container-log-max-workers"),
	flagged("containerLogMonitorInterval", "container-log-monitor-interval"),
	flagged("systemReserved", "system-reserved"),
	flagged("kubeReserved", "kube-reserved"),
	flagged("enforceNodeAllocatable", "enforce-node-allocatable"),
	flagged("systemReservedCgroup", "system-reserved-cgroup"),
	flagged("kubeReservedCgroup", "kube-reserved-cgroup"),
	flagged("kubeletCgroups", "kubelet-cgroups"),
	flagged("systemCgroups", "system-cgroups"),
	flagged("logging.verbosity", "v"),
	flagged("logging.format", "logging-format"),
	flagged("shutdownGracePeriod", "shutdown-grace-period"),
	flagged("shutdownGracePeriodCriticalPods", "shutdown-grace-period-critical-pods"),
	flagged("crashLoopBackOff.maxContainerRestartPeriod", "max-container-restart-period"),
	flagged("registerWithTaints", "register-with-taints"),
	flagged("registerNode", "register-node"),
	flagged("providerID", "provider-id"),
	flagged("containerRuntimeEndpoint", "container-runtime-endpoint"),
	flagged("staticPodPath", "pod-manifest-path"),
	flagged("staticPodURL", "manifest-url"),
	flagged("staticPodURLHeader", "manifest-url-header"),
	flagged("fileCheckFrequency", "file-check-frequency"),
	flagged("httpCheckFrequency", "http-check-frequency"),
	flagged("imagePullCredentialsVerificationPolicy", "image-pull-credentials-verification-policy"),
	flagged("preloadedImagesVerificationAllowlist", "preloaded-images-verification-allowlist"),
	flagged("syncFrequency", "sync-frequency"),
	flagged("oomScoreAdj", "oom-score-adj"),
	flagged("maxOpenFiles", "max-open-files"),
	flagged("contentType", "kube-api-content-type"),
	flagged("enableContentionProfiling", "contention-profiling"),
	flagged("podCIDR", "pod-cidr"),
	flagged("makeIPTablesUtilChains", "make-iptables-util-chains"),
	flagged("enableControllerAttachDetach", "enable-controller-attach-detach"),
	flagged("qosReserved", "qos-reserved"),
	{path: "mergeDefaultEvictionSettings", use: useLoad,
		reason: "as the kubelet's: the eviction thresholds the file leaves unset keep their defaults"},
	{path: "tracing", use: useFile,
		reason: "OpenTelemetry spans to an OTLP gRPC collector, as the kubelet's (tracing.go)"},
	{path: "nodeLeaseDurationSeconds", use: useFile,
		reason: "the node Lease's duration, renewed every quarter of it, as the kubelet's"},
	{path: "maxParallelImagePulls", use: useFile,
		reason: "how many images are pulled at once without serializeImagePulls, as the kubelet's"},
	{path: "singleProcessOOMKill", use: useFile,
		reason: "whether an OOM kill takes one process rather than the whole container on cgroup v2 (podspec.OOMKillGroup), as the kubelet's"},
	{path: "shutdownGracePeriodByPodPriority", use: useFile,
		reason: "a shutdown period per pod priority band, replacing the two periods (node.ShutdownConfig.ByPodPriority), as the kubelet's"},
	{path: "enableDebugFlagsHandler", use: useFile,
		reason: "/debug/flags/v on the kubelet API, as the kubelet's: a PUT of a number sets the log verbosity (klog's, and hostlet's: 3 and above is debug); false: 405"},
	{path: "userNamespaces", use: useFile,
		reason: "the host IDs each pod with hostUsers: false gets (podspec.UserNamespaceLength), as the kubelet's"},

	// Not implemented, and not to be ignored: a node that does not do what
	// its configuration says would surprise (security, placement, what the
	// scheduler sees).
	refuse("cpuManagerPolicy", "has no CPU manager: containers share the CPUs"),
	refuse("cpuManagerPolicyOptions", "has no CPU manager"),
	refuse("memoryManagerPolicy", "has no memory manager"),
	refuse("topologyManagerPolicy", "has no topology manager"),
	refuse("topologyManagerScope", "has no topology manager"),
	refuse("topologyManagerPolicyOptions", "has no topology manager"),
	refuse("runOnce", "has no run-once mode; the kubelet 1.35 refuses it too, at validation (deprecated), before this table is read"),
	refuse("reservedSystemCPUs", "has no CPU manager"),
	refuse("reservedMemory", "has no memory manager"),
	{path: "imageServiceEndpoint", use: useCheck, check: checkImageServiceEndpoint,
		reason: "taken when it is containerRuntimeEndpoint's socket; another refused: hostlet pulls into that containerd's own image store"},
	{path: "failCgroupV1", use: useCheck, check: checkFailCgroupV1,
		reason: "hostlet runs on cgroup v1 where the kubelet 1.35 would not (logged when a file says true)"},

	// Not implemented, harmlessly ignored (logged).
	ignore("cpuManagerReconcilePeriod", "has no CPU manager to reconcile"),
	ignore("runtimeRequestTimeout", "calls containerd's own API, not CRI: calls that need one have their own deadline, not one CRI timeout"),
	ignore("hairpinMode", "leaves hairpin to the CNI config, as the kubelet 1.35 does: it passes hairpinMode nowhere with a CRI runtime"),
	ignore("iptablesMasqueradeBit", "makes no masquerade rules; the kubelet 1.35 uses it for none either (kube-proxy has its own)"),
	ignore("iptablesDropBit", "makes no drop rules; the kubelet 1.35 uses it for none either"),
	ignore("configMapAndSecretChangeDetectionStrategy", "always watches them as the default Watch strategy does (one watch per object), which shows updates as soon as Cache or Get would"),
	ignore("showHiddenMetricsForVersion", "has no deprecated metrics hidden that it could show"),
	ignore("volumePluginDir", "has no FlexVolume plugins (deprecated): CSI drivers only"),
	ignore("kernelMemcgNotification", "measures memory each eviction round (10s), without the memcg threshold notification that would start a round early"),
	ignore("logging.flushFrequency", "writes its log unbuffered: nothing to flush"),
	ignore("logging.vmodule", "has one verbosity for all its code (logging.verbosity): logrus has no per-file levels"),
	ignore("logging.options", "writes JSON lines whole to stderr: no info buffer, no stream split"),
	ignore("memoryThrottlingFactor", "has no MemoryQoS (an alpha gate, off: the kubelet uses the factor only with it)"),
}

// hostletGates are the kubelet's feature gates of behaviour hostlet has:
// gated (hostlet follows the gate, as the kubelet's configuration checks
// and defaults do) or always had, whatever the gate says. Any other gate
// set away from its default is logged as having no effect on hostlet.
var hostletGates = map[string]string{
	"GracefulNodeShutdown":                             "gated: shutdownGracePeriod needs it",
	"QOSReserved":                                      "gated: qosReserved needs it",
	"GracefulNodeShutdownBasedOnPodPriority":           "gated: shutdownGracePeriodByPodPriority needs it",
	"KubeletCrashLoopBackOffMax":                       "gated: crashLoopBackOff.maxContainerRestartPeriod needs it",
	"RotateKubeletServerCertificate":                   "gated: serverTLSBootstrap needs it",
	"ImageMaximumGCAge":                                "gated: imageMaximumGCAge needs it",
	"NodeSwap":                                         "gated: memorySwap needs it",
	"UserNamespacesSupport":                            "always: pods with hostUsers: false",
	"ProcMountType":                                    "always: procMount Unmasked",
	"PodReadyToStartContainersCondition":               "always: the PodReadyToStartContainers condition",
	"ContainerRestartRules":                            "always: containers' restartPolicyRules",
	"ContainerStopSignals":                             "always: lifecycle.stopSignal",
	"PodLevelResources":                                "always: pod-level resources",
	"KubeletPodResourcesGet":                           "always: the pod resources API's Get",
	"KubeletFineGrainedAuthz":                          "always: the kubelet API's fine-grained subresources before nodes/proxy",
	"KubeletServiceAccountTokenForCredentialProviders": "gated: credential provider plugins' tokenAttributes need it",
	"NodeLogQuery":                                     "gated: enableSystemLogQuery needs it",
	"ClusterTrustBundleProjection":                     "gated: projected clusterTrustBundle sources",
	"ClusterTrustBundle":                               "gated: through ClusterTrustBundleProjection, which needs it",
	"EnvFiles":                                         "gated: env fileKeyRef",
	"HostnameOverride":                                 "gated: hostnameOverride",
	"PodCertificateRequest":                            "gated: projected podCertificate sources",
	"RecursiveReadOnlyMounts":                          "always: volumeMounts' recursiveReadOnly",
	"SupplementalGroupsPolicy":                         "always: supplementalGroupsPolicy, status.features, containers' status.user",
	"KubeletEnsureSecretPulledImages":                  "gated: imagePullCredentialsVerificationPolicy, the pulled-image records",
	"KubeletTracing":                                   "always: tracing (GA, locked on)",
	"NodeDeclaredFeatures":                             "gated: status.declaredFeatures and PodFeatureUnsupported admission",
	"CustomCPUCFSQuotaPeriod":                          "gated: cpuCFSQuotaPeriod other than 100ms needs it",
}

// resolveKubeletConfig makes the configuration effective as the kubelet
// does: base (the --config file and --config-dir drop-ins, already
// merged; nil without either) sets every flag of the same setting that is
// not on the command line; then the whole, flags included, is validated
// with the kubelet's messages, the feature gates are set, and the fields
// hostlet does not implement are refused or logged as ignored. The result
// is what /configz serves.
func (o *options) resolveKubeletConfig(fs *pflag.FlagSet, cmdline map[string]bool, base *kubeletv1beta1.KubeletConfiguration) error {
	fromFile := base != nil
	if fromFile {
		if err := applyToFlags(fs, cmdline, base); err != nil {
			return err
		}
	} else {
		base = kubeletconfig.Defaulted()
	}
	kc, err := effectiveConfig(fs, cmdline, base)
	if err != nil {
		return err
	}
	gates := kubeletconfig.NewFeatureGate()
	if err := gates.SetFromMap(kc.FeatureGates); err != nil {
		return fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
	}
	// Its default depends on the gate, known only now (the flag's default
	// is "", which the kubelet's validation refuses with the gate off).
	if gates.Enabled("KubeletEnsureSecretPulledImages") && kc.ImagePullCredentialsVerificationPolicy == "" {
		kc.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
	if err := kubeletconfig.Validate(kc, gates); err != nil {
		return fmt.Errorf("failed to validate kubelet configuration, error: %w", err)
	}
	// Not in the kubelet's validation: its NewMainKubelet refuses it.
	if kc.SyncFrequency.Duration <= 0 {
		return fmt.Errorf("failed to create kubelet: invalid sync frequency %d", kc.SyncFrequency.Duration)
	}
	warnings, err := checkUnimplemented(kc, fromFile)
	if err != nil {
		return err
	}
	qosWarning, err := checkQOSReserved(kc, gates)
	if err != nil {
		return err
	}
	if qosWarning != "" {
		warnings = append(warnings, qosWarning)
	}
	o.warnings = append(o.warnings, warnings...)
	o.warnings = append(o.warnings, gateWarnings(kc.FeatureGates, gates)...)
	o.kubeletConfig, o.gates = kc, gates
	return nil
}

// applyToFlags sets each flag from its field, unless the command line gave
// it: the kubelet's kubeletConfigFlagPrecedence. Feature gates merge: the
// command line's win, the file's others stay.
func applyToFlags(fs *pflag.FlagSet, cmdline map[string]bool, kc *kubeletv1beta1.KubeletConfiguration) error {
	for _, f := range kubeletFields {
		if f.use != useFlag {
			continue
		}
		fl := fs.Lookup(f.flag)
		if cmdline[f.flag] {
			if gates, ok := fl.Value.(*cliflag.MapStringBool); ok {
				for k, v := range kc.FeatureGates {
					if _, given := (*gates.Map)[k]; !given {
						(*gates.Map)[k] = v
					}
				}
			}
			continue
		}
		s, ok := flagString(fieldByPath(reflect.ValueOf(kc), f.path), fl)
		if !ok {
			continue
		}
		if err := fs.Set(f.flag, s); err != nil {
			return fmt.Errorf("%s (--%s) %q: %w", f.path, f.flag, s, err)
		}
	}
	return nil
}

// effectiveConfig is base with every implemented field set from its flag's
// final value (the command line's, else the configuration's, else the
// flag's default). A pointer field the configuration left nil stays nil
// unless the command line set it: maxContainerRestartPeriod, which must
// not be set while KubeletCrashLoopBackOffMax is off.
func effectiveConfig(fs *pflag.FlagSet, cmdline map[string]bool, base *kubeletv1beta1.KubeletConfiguration) (*kubeletv1beta1.KubeletConfiguration, error) {
	kc := base.DeepCopy()
	kc.TypeMeta = metav1.TypeMeta{} // /configz serves it without, as the kubelet's
	for _, f := range kubeletFields {
		if f.use != useFlag {
			continue
		}
		dst := fieldByPath(reflect.ValueOf(kc), f.path)
		if dst.Kind() == reflect.Pointer && dst.IsNil() && !cmdline[f.flag] {
			continue
		}
		if err := setFromFlag(fs, fs.Lookup(f.flag), dst); err != nil {
			return nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
	}
	return kc, nil
}

// checkUnimplemented compares each field hostlet does not implement with
// the kubelet's default: a refused one that differs is an error naming it
// (all of them at once), an ignored one a warning.
func checkUnimplemented(kc *kubeletv1beta1.KubeletConfiguration, fromFile bool) (warnings []string, err error) {
	def := reflect.ValueOf(kubeletconfig.Defaulted())
	var refused []string
	for _, f := range kubeletFields {
		switch f.use {
		case useCheck:
			w, r := f.check(kc, fromFile)
			if w != "" {
				warnings = append(warnings, w)
			}
			if r != "" {
				refused = append(refused, r)
			}
		case useRefuse, useWarn:
			got := fieldByPath(reflect.ValueOf(kc), f.path)
			if sameValue(got, fieldByPath(def, f.path)) {
				continue
			}
			msg := fmt.Sprintf("%s: %s (hostlet %s)", f.path, render(got), f.reason)
			if f.use == useRefuse {
				refused = append(refused, msg)
			} else {
				warnings = append(warnings, "ignored: "+msg)
			}
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("the kubelet configuration sets what hostlet does not implement:\n  %s", strings.Join(refused, "\n  "))
	}
	return warnings, nil
}

// gateWarnings name the gates set away from their default that hostlet
// does not follow: an "always" gate turned off, or a gate of behaviour
// hostlet does not have.
func gateWarnings(set map[string]bool, gates featuregate.FeatureGate) []string {
	defaults := kubeletconfig.NewFeatureGate()
	var out []string
	for name, v := range set {
		if v == defaults.Enabled(featuregate.Feature(name)) {
			continue
		}
		use, ok := hostletGates[name]
		switch {
		case ok && strings.HasPrefix(use, "gated"):
		case ok && v:
		case ok:
			out = append(out, fmt.Sprintf("feature gate %s=false has no effect: hostlet has it %s", name, use))
		default:
			out = append(out, fmt.Sprintf("feature gate %s=%t has no effect: hostlet does not implement what it gates", name, v))
		}
	}
	sort.Strings(out)
	return out
}

// checkFailCgroupV1 notes, when a configuration file says failCgroupV1
// (true, its default), that hostlet runs on a cgroup v1 host where the
// kubelet 1.35 would refuse to. Without a file it is hostlet's own
// behaviour, said once in docs/node.md rather than at every start.
func checkFailCgroupV1(kc *kubeletv1beta1.KubeletConfiguration, fromFile bool) (warning, refusal string) {
	if fromFile && ptr.Deref(kc.FailCgroupV1, true) && cgroupV1() {
		return "ignored: failCgroupV1: true: hostlet runs on this cgroup v1 host (the kubelet would not)", ""
	}
	return "", ""
}

// checkQOSReserved parses qosReserved as the kubelet does at start (a
// value it cannot parse stops it, gate or not); without the QOSReserved
// gate (alpha, off) the kubelet then ignores it, and so does hostlet,
// saying so. With the gate the QoS cgroups get their memory limits
// (nodecontainers.QOSReserve).
func checkQOSReserved(kc *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) (warning string, err error) {
	if len(kc.QOSReserved) == 0 {
		return "", nil
	}
	value := render(reflect.ValueOf(kc.QOSReserved))
	if _, err := kubeletconfig.ParseQOSReserved(kc.QOSReserved); err != nil {
		return "", fmt.Errorf("qosReserved: %s: --qos-reserved value failed to parse: %w", value, err)
	}
	if !gates.Enabled("QOSReserved") {
		return fmt.Sprintf("ignored: qosReserved: %s: without the QOSReserved feature gate it has no effect, as with the kubelet", value), nil
	}
	return "", nil
}

// checkImageServiceEndpoint takes imageServiceEndpoint when it is the
// containerd of containerRuntimeEndpoint (as the kubelet takes an empty
// one): hostlet pulls through that containerd's own image store, so
// another image service would go unused while the file says it is used.
func checkImageServiceEndpoint(kc *kubeletv1beta1.KubeletConfiguration, _ bool) (warning, refusal string) {
	if kc.ImageServiceEndpoint == "" || sameEndpoint(kc.ImageServiceEndpoint, kc.ContainerRuntimeEndpoint) {
		return "", ""
	}
	return "", fmt.Sprintf("imageServiceEndpoint: %q (hostlet pulls images into the containerd of containerRuntimeEndpoint %q, whose image store its containers run from; a separate image service is not implemented)",
		kc.ImageServiceEndpoint, kc.ContainerRuntimeEndpoint)
}

// sameEndpoint says whether two CRI endpoints are one socket, as the
// kubelet's CRI client parses them: a path without a scheme is a unix
// socket's.
func sameEndpoint(a, b string) bool {
	norm := func(s string) string {
		s = strings.TrimPrefix(s, "unix://")
		if strings.Contains(s, "://") {
			return s
		}
		return filepath.Clean(s)
	}
	return norm(a) == norm(b)
}

// cgroupV1 says whether the host mounts cgroup v1 (no unified hierarchy).
var cgroupV1 = func() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return errors.Is(err, os.ErrNotExist)
}

// fieldByPath is the field at path (JSON names, dot-separated) of the
// struct v points to; the zero Value if a pointer on the way is nil.
func fieldByPath(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		v = fieldByJSONName(v, name)
		if !v.IsValid() {
			panic("no KubeletConfiguration field " + path)
		}
	}
	return v
}

func fieldByJSONName(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// flagString is a field's value as its flag takes it; false when the
// field is unset (a nil pointer, list or map, an empty string), which
// leaves the flag at its default. An empty map or list set explicitly is
// given as "" (no eviction thresholds, no DNS servers).
func flagString(v reflect.Value, fl *pflag.Flag) (string, bool) {
	if !v.IsValid() {
		return "", false
	}
	explicit := false
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "", false
		}
		v, explicit = v.Elem(), true
	}
	switch x := v.Interface().(type) {
	case metav1.Duration:
		return x.Duration.String(), true
	case []v1.Taint:
		parts := make([]string, len(x))
		for i, t := range x {
			parts[i] = t.Key
			if t.Value != "" {
				parts[i] += "=" + t.Value
			}
			parts[i] += ":" + string(t.Effect)
		}
		return strings.Join(parts, ","), x != nil
	case []string:
		return strings.Join(x, ","), x != nil
	case map[string]string:
		if len(x) == 0 {
			// Only the eviction threshold flags take an empty value.
			_, ok := fl.Value.(*langleMap)
			return "", x != nil && ok
		}
		return joinPairs(x), true
	case map[string][]string:
		// As --manifest-url-header takes it: name:value, in order.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			for _, v := range x[k] {
				parts = append(parts, k+":"+v)
			}
		}
		return strings.Join(parts, ","), len(parts) > 0
	case map[string]bool:
		m := make(map[string]string, len(x))
		for k, b := range x {
			m[k] = strconv.FormatBool(b)
		}
		return joinPairs(m), len(x) > 0
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), v.String() != "" || explicit
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint32:
		return strconv.FormatUint(v.Uint(), 10), true
	}
	panic(fmt.Sprintf("no flag form for %s", v.Type()))
}

func joinPairs(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// setFromFlag sets dst, a field, to the flag's value.
func setFromFlag(fs *pflag.FlagSet, fl *pflag.Flag, dst reflect.Value) error {
	if dst.Kind() == reflect.Pointer {
		dst.Set(reflect.New(dst.Type().Elem()))
		dst = dst.Elem()
	}
	s := fl.Value.String()
	switch p := dst.Addr().Interface().(type) {
	case *metav1.Duration:
		d, err := time.ParseDuration(s)
		p.Duration = d
		return err
	case *[]v1.Taint:
		taints, err := parseTaints(fl.Value.(pflag.SliceValue).GetSlice())
		*p = taints
		return err
	case *[]string:
		*p = fl.Value.(pflag.SliceValue).GetSlice()
		return nil
	case *map[string]string:
		var m map[string]string
		if l, ok := fl.Value.(*langleMap); ok {
			m = *l.m
		} else {
			var err error
			if m, err = fs.GetStringToString(fl.Name); err != nil {
				return err
			}
		}
		*p = nil
		if m != nil {
			*p = make(map[string]string, len(m))
			for k, v := range m {
				(*p)[k] = v
			}
		}
		return nil
	case *map[string][]string:
		src := *fl.Value.(*cliflag.ColonSeparatedMultimapStringString).Multimap
		*p = nil
		if len(src) > 0 {
			*p = make(map[string][]string, len(src))
			for k, v := range src {
				(*p)[k] = append([]string(nil), v...)
			}
		}
		return nil
	case *map[string]bool:
		src := *fl.Value.(*cliflag.MapStringBool).Map
		*p = nil
		if len(src) > 0 {
			*p = make(map[string]bool, len(src))
			for k, v := range src {
				(*p)[k] = v
			}
		}
		return nil
	}
	switch dst.Kind() {
	case reflect.String:
		dst.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		dst.SetBool(b)
		return err
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, dst.Type().Bits())
		dst.SetInt(n)
		return err
	case reflect.Uint32:
		n, err := strconv.ParseUint(s, 10, 32)
		dst.SetUint(n)
		return err
	default:
		return fmt.Errorf("no field form for %s", dst.Type())
	}
	return nil
}

// sameValue compares two fields, a nil pointer, list or map equal to an
// empty one.
func sameValue(a, b reflect.Value) bool {
	empty := func(v reflect.Value) bool {
		if !v.IsValid() {
			return true
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			return v.IsNil()
		case reflect.Map, reflect.Slice:
			return v.Len() == 0
		}
		return false
	}
	if empty(a) || empty(b) {
		return empty(a) && empty(b)
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// render is a field's value as the configuration file says it.
func render(v reflect.Value) string {
	if !v.IsValid() {
		return "null"
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return string(b)
}
