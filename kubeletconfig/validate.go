package kubeletconfig

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/hostlet/hostlet/provider/pullrecords"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
	"k8s.io/utils/ptr"
)

// The kubelet's enforceNodeAllocatable keys.
const (
	enforcePods                   = "pods"
	enforceSystemReserved         = "system-reserved"
	enforceSystemReservedCompress = "system-reserved-compressible"
	enforceKubeReserved           = "kube-reserved"
	enforceKubeReservedCompress   = "kube-reserved-compressible"
	enforceNone                   = "none"
)

// userNsUnitLength is the kubelet's unit of user namespace IDs per pod.
const userNsUnitLength = 65536

// Validate is the kubelet's ValidateKubeletConfiguration (v1.35) on a
// defaulted configuration, with its messages, against the gates fg with the
// configuration's own featureGates set over them. Left out: the checks of
// fields hostlet refuses whenever they differ from the kubelet's default
// (reservedMemory, showHiddenMetricsForVersion, the image credential
// allowlist patterns), and failCgroupV1, which hostlet does not enforce
// (it runs on cgroup v1 and v2).
func Validate(kc *kubeletv1beta1.KubeletConfiguration, fg featuregate.FeatureGate) error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid configuration: "+format, args...))
	}

	gates := fg.DeepCopy()
	if err := gates.SetFromMap(kc.FeatureGates); err != nil {
		return err
	}
	errs = append(errs, gates.Validate()...)
	on := func(name string) bool { return gates.Enabled(featuregate.Feature(name)) }

	i32 := func(p *int32) int32 { return ptr.Deref(p, 0) }
	if kc.NodeLeaseDurationSeconds <= 0 {
		add("nodeLeaseDurationSeconds must be greater than 0")
	}
	if kc.SystemCgroups != "" && kc.CgroupRoot == "" {
		add("systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified")
	}
	if kc.EventBurst < 0 {
		add("eventBurst (--event-burst) %v must not be a negative number", kc.EventBurst)
	}
	if i32(kc.EventRecordQPS) < 0 {
		add("eventRecordQPS (--event-qps) %v must not be a negative number", i32(kc.EventRecordQPS))
	}
	if hp := i32(kc.HealthzPort); hp != 0 && utilvalidation.IsValidPortNum(int(hp)) != nil {
		add("healthzPort (--healthz-port) %v must be between 1 and 65535, inclusive", hp)
	}
	period := ptr.Deref(kc.CPUCFSQuotaPeriod, metav1.Duration{Duration: 100 * time.Millisecond})
	if !on("CustomCPUCFSQuotaPeriod") && period.Duration != 100*time.Millisecond {
		add("cpuCFSQuotaPeriod (--cpu-cfs-quota-period) %v requires feature gate CustomCPUCFSQuotaPeriod", period)
	}
	if on("CustomCPUCFSQuotaPeriod") && utilvalidation.IsInRange(int(period.Duration), int(time.Millisecond), int(time.Second)) != nil {
		add("cpuCFSQuotaPeriod (--cpu-cfs-quota-period) %v must be between 1ms and 1sec, inclusive", period)
	}
	high, low := i32(kc.ImageGCHighThresholdPercent), i32(kc.ImageGCLowThresholdPercent)
	if utilvalidation.IsInRange(int(high), 0, 100) != nil {
		add("imageGCHighThresholdPercent (--image-gc-high-threshold) %v must be between 0 and 100, inclusive", high)
	}
	if utilvalidation.IsInRange(int(low), 0, 100) != nil {
		add("imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be between 0 and 100, inclusive", low)
	}
	if low >= high {
		add("imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) %v", low, high)
	}
	if kc.ImageMaximumGCAge.Duration != 0 && !on("ImageMaximumGCAge") {
		add("ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge")
	}
	if kc.ImageMaximumGCAge.Duration < 0 {
		add("imageMaximumGCAge %v must not be negative", kc.ImageMaximumGCAge.Duration)
	}
	if kc.ImageMaximumGCAge.Duration > 0 && kc.ImageMaximumGCAge.Duration <= kc.ImageMinimumGCAge.Duration {
		add("imageMaximumGCAge %v must be greater than imageMinimumGCAge %v", kc.ImageMaximumGCAge.Duration, kc.ImageMinimumGCAge.Duration)
	}
	if b := i32(kc.IPTablesDropBit); utilvalidation.IsInRange(int(b), 0, 31) != nil {
		add("iptablesDropBit (--iptables-drop-bit) %v must be between 0 and 31, inclusive", b)
	}
	if b := i32(kc.IPTablesMasqueradeBit); utilvalidation.IsInRange(int(b), 0, 31) != nil {
		add("iptablesMasqueradeBit (--iptables-masquerade-bit) %v must be between 0 and 31, inclusive", b)
	}
	if kc.KubeAPIBurst < 0 {
		add("kubeAPIBurst (--kube-api-burst) %v must not be a negative number", kc.KubeAPIBurst)
	}
	if i32(kc.KubeAPIQPS) < 0 {
		add("kubeAPIQPS (--kube-api-qps) %v must not be a negative number", i32(kc.KubeAPIQPS))
	}
	if n := i32(kc.NodeStatusMaxImages); n < -1 {
		add("nodeStatusMaxImages (--node-status-max-images) %v must be -1 or greater", n)
	}
	if kc.MaxOpenFiles < 0 {
		add("maxOpenFiles (--max-open-files) %v must not be a negative number", kc.MaxOpenFiles)
	}
	if kc.MaxPods < 0 {
		add("maxPods (--max-pods) %v must not be a negative number", kc.MaxPods)
	}
	if o := i32(kc.OOMScoreAdj); utilvalidation.IsInRange(int(o), -1000, 1000) != nil {
		add("oomScoreAdj (--oom-score-adj) %v must be between -1000 and 1000, inclusive", o)
	}
	if kc.PodsPerCore < 0 {
		add("podsPerCore (--pods-per-core) %v must not be a negative number", kc.PodsPerCore)
	}
	if utilvalidation.IsValidPortNum(int(kc.Port)) != nil {
		add("port (--port) %v must be between 1 and 65535, inclusive", kc.Port)
	}
	if kc.ReadOnlyPort != 0 && utilvalidation.IsValidPortNum(int(kc.ReadOnlyPort)) != nil {
		add("readOnlyPort (--read-only-port) %v must be between 0 and 65535, inclusive", kc.ReadOnlyPort)
	}
	if kc.RegistryBurst < 0 {
		add("registryBurst (--registry-burst) %v must not be a negative number", kc.RegistryBurst)
	}
	if q := i32(kc.RegistryPullQPS); q < 0 {
		add("registryPullQPS (--registry-qps) %v must not be a negative number", q)
	}
	if kc.MaxParallelImagePulls != nil && *kc.MaxParallelImagePulls < 1 {
		add("maxParallelImagePulls %v must be a positive number", *kc.MaxParallelImagePulls)
	}
	if ptr.Deref(kc.SerializeImagePulls, true) && kc.MaxParallelImagePulls != nil && *kc.MaxParallelImagePulls > 1 {
		add("maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false")
	}
	if kc.ServerTLSBootstrap && !on("RotateKubeletServerCertificate") {
		add("serverTLSBootstrap %v requires feature gate RotateKubeletServerCertificate", kc.ServerTLSBootstrap)
	}
	if kc.RunOnce {
		add("runOnce (--runOnce) %v, Runonce mode has been deprecated and should not be set", kc.RunOnce)
	}
	for _, t := range kc.RegisterWithTaints {
		if err := checkTaint(t); err != nil {
			errs = append(errs, fmt.Errorf("invalid taint: %v", t))
		}
		if t.TimeAdded != nil {
			add("taint.TimeAdded is not nil")
		}
	}
	if p := kc.TopologyManagerPolicy; !slices.Contains([]string{kubeletv1beta1.NoneTopologyManagerPolicy, kubeletv1beta1.BestEffortTopologyManagerPolicy,
		kubeletv1beta1.RestrictedTopologyManagerPolicy, kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy}, p) {
		add("topologyManagerPolicy (--topology-manager-policy) %q must be one of: %q", p, []string{kubeletv1beta1.NoneTopologyManagerPolicy,
			kubeletv1beta1.BestEffortTopologyManagerPolicy, kubeletv1beta1.RestrictedTopologyManagerPolicy, kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy})
	}
	if s := kc.TopologyManagerScope; s != kubeletv1beta1.ContainerTopologyManagerScope && s != kubeletv1beta1.PodTopologyManagerScope {
		add("topologyManagerScope (--topology-manager-scope) %q must be one of: %q, or %q", s, kubeletv1beta1.ContainerTopologyManagerScope, kubeletv1beta1.PodTopologyManagerScope)
	}

	grace, critical := kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration
	if on("GracefulNodeShutdown") {
		if critical > grace {
			add("shutdownGracePeriodCriticalPods %v must be <= shutdownGracePeriod %v", kc.ShutdownGracePeriodCriticalPods, kc.ShutdownGracePeriod)
		}
		if grace < 0 || (grace > 0 && grace < time.Second) {
			add("shutdownGracePeriod %v must be either zero or otherwise >= 1 sec", kc.ShutdownGracePeriod)
		}
		if critical < 0 || (critical > 0 && critical < time.Second) {
			add("shutdownGracePeriodCriticalPods %v must be either zero or otherwise >= 1 sec", kc.ShutdownGracePeriodCriticalPods)
		}
	}
	if (grace > 0 || critical > 0) && !on("GracefulNodeShutdown") {
		add("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown")
	}
	if on("GracefulNodeShutdownBasedOnPodPriority") {
		if len(kc.ShutdownGracePeriodByPodPriority) != 0 && (grace > 0 || critical > 0) {
			add("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time")
		}
	} else if len(kc.ShutdownGracePeriodByPodPriority) != 0 {
		add("Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority")
	}
	if on("NodeSwap") {
		switch kc.MemorySwap.SwapBehavior {
		case "", "NoSwap", "LimitedSwap":
		default:
			add("memorySwap.swapBehavior %q must be one of: \"\", %q or %q", kc.MemorySwap.SwapBehavior, "LimitedSwap", "NoSwap")
		}
	} else if kc.MemorySwap != (kubeletv1beta1.MemorySwapConfiguration{}) {
		add("memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled")
	}
	maxRestart := kc.CrashLoopBackOff.MaxContainerRestartPeriod
	if on("KubeletCrashLoopBackOffMax") {
		if maxRestart == nil {
			add("FeatureGate KubeletCrashLoopBackOffMax is enabled, CrashLoopBackOff.MaxContainerRestartPeriod must be set")
		} else if utilvalidation.IsInRange(int(maxRestart.Duration.Milliseconds()), 1000, 300000) != nil {
			add("CrashLoopBackOff.MaxContainerRestartPeriod (got: %v seconds) must be set between 1s and 300s", maxRestart.Seconds())
		}
	} else if maxRestart != nil {
		add("FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set")
	}

	errs = append(errs, validateEnforceNodeAllocatable(kc)...)
	switch kc.HairpinMode {
	case kubeletv1beta1.HairpinNone, kubeletv1beta1.HairpinVeth, kubeletv1beta1.PromiscuousBridge:
	default:
		add("option %q specified for hairpinMode (--hairpin-mode). Valid options are %q, %q or %q",
			kc.HairpinMode, kubeletv1beta1.HairpinNone, kubeletv1beta1.HairpinVeth, kubeletv1beta1.PromiscuousBridge)
	}
	policy := kc.ImagePullCredentialsVerificationPolicy
	if on("KubeletEnsureSecretPulledImages") {
		switch policy {
		case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify:
		default:
			add("option %q specified for imagePullCredentialsVerificationPolicy. Valid options are %q, %q, %q or %q",
				policy, kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify)
		}
		if len(kc.PreloadedImagesVerificationAllowlist) > 0 && policy != kubeletv1beta1.NeverVerifyAllowlistedImages {
			add("can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\"")
		} else if err := pullrecords.ValidateAllowlist(kc.PreloadedImagesVerificationAllowlist); err != nil {
			add("invalid image pattern in `preloadedImagesVerificationAllowlist`: %v", err)
		}
	} else {
		if len(policy) > 0 {
			add("`imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled")
		}
		if len(kc.PreloadedImagesVerificationAllowlist) > 0 {
			add("`preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled")
		}
	}
	if kc.ReservedSystemCPUs != "" {
		if kc.SystemReservedCgroup != "" || kc.KubeReservedCgroup != "" {
			add("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)")
		}
		if _, err := cpuset.Parse(kc.ReservedSystemCPUs); err != nil {
			add("unable to parse reservedSystemCPUs (--reserved-cpus) %v, error: %w", kc.ReservedSystemCPUs, err)
		}
	}
	if err := validateOS(kc); err != nil {
		errs = append(errs, err)
	}
	if fieldErrs := logsapi.Validate(&kc.Logging, gates, field.NewPath("logging")); len(fieldErrs) > 0 {
		errs = append(errs, fieldErrs.ToAggregate().Errors()...)
	}
	if fieldErrs := tracingapi.ValidateTracingConfiguration(kc.Tracing, gates, field.NewPath("tracing")); len(fieldErrs) > 0 {
		errs = append(errs, fieldErrs.ToAggregate().Errors()...)
	}
	if on("MemoryQoS") && kc.MemoryThrottlingFactor == nil {
		add("memoryThrottlingFactor is required when MemoryQoS feature flag is enabled")
	}
	if f := kc.MemoryThrottlingFactor; f != nil && (*f <= 0 || *f > 1.0) {
		add("memoryThrottlingFactor %v must be greater than 0 and less than or equal to 1.0", *f)
	}
	if kc.ContainerRuntimeEndpoint == "" {
		add("the containerRuntimeEndpoint was not specified or empty")
	}
	logQuery, logHandler := ptr.Deref(kc.EnableSystemLogQuery, false), ptr.Deref(kc.EnableSystemLogHandler, true)
	if logQuery && !on("NodeLogQuery") {
		add("NodeLogQuery feature gate is required for enableSystemLogQuery")
	}
	if logQuery && !logHandler {
		add("enableSystemLogHandler is required for enableSystemLogQuery")
	}
	if ptr.Deref(kc.ContainerLogMaxWorkers, 1) < 1 {
		add("containerLogMaxWorkers must be greater than or equal to 1")
	}
	if kc.ContainerLogMonitorInterval != nil && kc.ContainerLogMonitorInterval.Duration.Seconds() < 3 {
		add("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s")
	}
	if ptr.Deref(kc.ContainerLogMaxFiles, 5) <= 1 {
		add("containerLogMaxFiles must be greater than 1")
	}
	errs = append(errs, validatePodLogsDir(kc.PodLogsDir)...)
	return utilerrors.NewAggregate(errs)
}

// validateEnforceNodeAllocatable is the kubelet's check of
// enforceNodeAllocatable.
func validateEnforceNodeAllocatable(kc *kubeletv1beta1.KubeletConfiguration) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid configuration: "+format, args...))
	}
	has := map[string]bool{}
	for _, v := range kc.EnforceNodeAllocatable {
		has[v] = true
	}
	if has[enforceSystemReservedCompress] && has[enforceSystemReserved] {
		add("both %q and %q cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)", enforceSystemReserved, enforceSystemReservedCompress)
	}
	if has[enforceKubeReservedCompress] && has[enforceKubeReserved] {
		add("both %q and %q cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)", enforceKubeReserved, enforceKubeReservedCompress)
	}
	seen := map[string]bool{}
	for _, v := range kc.EnforceNodeAllocatable {
		if seen[v] {
			add("duplicated enforcements %q in enforceNodeAllocatable (--enforce-node-allocatable)", v)
			continue
		}
		seen[v] = true
		switch v {
		case enforcePods:
		case enforceSystemReserved, enforceSystemReservedCompress:
			if kc.SystemReservedCgroup == "" {
				add("systemReservedCgroup (--system-reserved-cgroup) must be specified when %q or %q included in enforceNodeAllocatable (--enforce-node-allocatable)", enforceSystemReserved, enforceSystemReservedCompress)
			}
		case enforceKubeReserved, enforceKubeReservedCompress:
			if kc.KubeReservedCgroup == "" {
				add("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when %q or %q included in enforceNodeAllocatable (--enforce-node-allocatable)", enforceKubeReserved, enforceKubeReservedCompress)
			}
		case enforceNone:
			if len(kc.EnforceNodeAllocatable) > 1 {
				add("enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when %q is specified", enforceNone)
			}
			continue
		default:
			add("option %q specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are %q, %q, %q, %q, %q or %q",
				v, enforcePods, enforceSystemReserved, enforceSystemReservedCompress, enforceKubeReserved, enforceKubeReservedCompress, enforceNone)
			continue
		}
		if !ptr.Deref(kc.CgroupsPerQOS, true) {
			add("cgroupsPerQOS (--cgroups-per-qos) must be set to true when %q contained in enforceNodeAllocatable (--enforce-node-allocatable)", v)
		}
	}
	return errs
}

// validateOS is the kubelet's Linux checks but failCgroupV1's.
func validateOS(kc *kubeletv1beta1.KubeletConfiguration) error {
	if ns := kc.UserNamespaces; ns != nil && ns.IDsPerPod != nil {
		ids := *ns.IDsPerPod
		switch {
		case ids < userNsUnitLength:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be less than %d", userNsUnitLength)
		case ids%userNsUnitLength != 0:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must be a multiple of %d", userNsUnitLength)
		case ids > math.MaxUint32:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be more than %d", int64(math.MaxUint32))
		}
	}
	return nil
}

// validatePodLogsDir is the kubelet's check of podLogsDir: absolute, clean,
// ASCII (it is in metrics' labels).
func validatePodLogsDir(d string) []error {
	var errs []error
	if d == "" {
		errs = append(errs, fmt.Errorf("invalid configuration: podLogsDir was not specified"))
	}
	if !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("invalid configuration: pod logs path %q must be absolute path", d))
	}
	if filepath.Clean(d) != d {
		errs = append(errs, fmt.Errorf("invalid configuration: pod logs path %q must be normalized", d))
	}
	for _, c := range d {
		if c > unicode.MaxASCII {
			errs = append(errs, fmt.Errorf("invalid configuration: pod logs path %q mut contains ASCII characters only", d))
			break
		}
	}
	return errs
}

// checkTaint is the kubelet's CheckTaintValidation.
func checkTaint(t v1.Taint) error {
	if errs := utilvalidation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("invalid taint key: %s", strings.Join(errs, "; "))
	}
	if t.Value != "" {
		if errs := utilvalidation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return fmt.Errorf("invalid taint value: %s", strings.Join(errs, "; "))
		}
	}
	switch t.Effect {
	case "", v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("invalid taint effect: %v, unsupported taint effect", t.Effect)
}
