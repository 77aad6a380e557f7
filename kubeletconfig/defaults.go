package kubeletconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// The kubelet's defaults that other packages of the kubelet declare.
const (
	DefaultPodLogsDir             = "/var/log/pods"
	DefaultVolumePluginDir        = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
	DefaultResolvConf             = "/etc/resolv.conf"
	DefaultContainerRuntime       = "unix:///run/containerd/containerd.sock"
	DefaultMaxContainerBackOff    = 300 * time.Second
	DefaultMemoryThrottlingFactor = 0.9
	kubeletOOMScoreAdj            = -999
)

// SetDefaults is the kubelet's SetDefaults_KubeletConfiguration (v1.35),
// field for field, with one exception: cgroupDriver stays empty when not
// given, where the kubelet writes "cgroupfs". The kubelet (since
// KubeletCgroupDriverFromCRI) runs with the driver containerd's CRI reports
// whatever its configuration says; hostlet's empty driver means the same,
// and a defaulted "cgroupfs" would force the wrong one on a systemd host.
func SetDefaults(obj *kubeletv1beta1.KubeletConfiguration) {
	// Defaults that depend on a gate see the gates this configuration sets.
	gates := NewFeatureGate()
	_ = gates.SetFromMap(obj.FeatureGates) // a bad gate is validation's error

	zero := metav1.Duration{}
	duration := func(d *metav1.Duration, v time.Duration) {
		if *d == zero {
			*d = metav1.Duration{Duration: v}
		}
	}
	if obj.EnableServer == nil {
		obj.EnableServer = ptr.To(true)
	}
	duration(&obj.SyncFrequency, time.Minute)
	duration(&obj.FileCheckFrequency, 20*time.Second)
	duration(&obj.HTTPCheckFrequency, 20*time.Second)
	if obj.Address == "" {
		obj.Address = "0.0.0.0"
	}
	if obj.Port == 0 {
		obj.Port = 10250
	}
	if obj.Authentication.Anonymous.Enabled == nil {
		obj.Authentication.Anonymous.Enabled = ptr.To(false)
	}
	if obj.Authentication.Webhook.Enabled == nil {
		obj.Authentication.Webhook.Enabled = ptr.To(true)
	}
	duration(&obj.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if obj.Authorization.Mode == "" {
		obj.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	}
	duration(&obj.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	duration(&obj.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	if obj.RegistryPullQPS == nil {
		obj.RegistryPullQPS = ptr.To[int32](5)
	}
	if obj.RegistryBurst == 0 {
		obj.RegistryBurst = 10
	}
	if obj.EventRecordQPS == nil {
		obj.EventRecordQPS = ptr.To[int32](50)
	}
	if obj.EventBurst == 0 {
		obj.EventBurst = 100
	}
	if obj.EnableDebuggingHandlers == nil {
		obj.EnableDebuggingHandlers = ptr.To(true)
	}
	if obj.HealthzPort == nil {
		obj.HealthzPort = ptr.To[int32](10248)
	}
	if obj.HealthzBindAddress == "" {
		obj.HealthzBindAddress = "127.0.0.1"
	}
	if obj.OOMScoreAdj == nil {
		obj.OOMScoreAdj = ptr.To[int32](kubeletOOMScoreAdj)
	}
	duration(&obj.StreamingConnectionIdleTimeout, 4*time.Hour)
	if obj.NodeStatusReportFrequency == zero {
		// An explicit update frequency is the report frequency too, for
		// backward compatibility.
		if obj.NodeStatusUpdateFrequency == zero {
			obj.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}
		} else {
			obj.NodeStatusReportFrequency = obj.NodeStatusUpdateFrequency
		}
	}
	duration(&obj.NodeStatusUpdateFrequency, 10*time.Second)
	if obj.NodeLeaseDurationSeconds == 0 {
		obj.NodeLeaseDurationSeconds = 40
	}
	duration(&obj.ImageMinimumGCAge, 2*time.Minute)
	if obj.ImageGCHighThresholdPercent == nil {
		obj.ImageGCHighThresholdPercent = ptr.To[int32](85)
	}
	if obj.ImageGCLowThresholdPercent == nil {
		obj.ImageGCLowThresholdPercent = ptr.To[int32](80)
	}
	duration(&obj.VolumeStatsAggPeriod, time.Minute)
	if obj.CgroupsPerQOS == nil {
		obj.CgroupsPerQOS = ptr.To(true)
	}
	if obj.CPUManagerPolicy == "" {
		obj.CPUManagerPolicy = "none"
	}
	duration(&obj.CPUManagerReconcilePeriod, 10*time.Second)
	if obj.MemoryManagerPolicy == "" {
		obj.MemoryManagerPolicy = kubeletv1beta1.NoneMemoryManagerPolicy
	}
	if obj.TopologyManagerPolicy == "" {
		obj.TopologyManagerPolicy = kubeletv1beta1.NoneTopologyManagerPolicy
	}
	if obj.TopologyManagerScope == "" {
		obj.TopologyManagerScope = kubeletv1beta1.ContainerTopologyManagerScope
	}
	duration(&obj.RuntimeRequestTimeout, 2*time.Minute)
	if obj.HairpinMode == "" {
		obj.HairpinMode = kubeletv1beta1.PromiscuousBridge
	}
	if obj.MaxPods == 0 {
		obj.MaxPods = 110
	}
	// Nil or negative: -1, the node's allocatable pids.
	if obj.PodPidsLimit == nil || *obj.PodPidsLimit < 0 {
		obj.PodPidsLimit = ptr.To[int64](-1)
	}
	if obj.ResolverConfig == nil {
		obj.ResolverConfig = ptr.To(DefaultResolvConf)
	}
	if obj.CPUCFSQuota == nil {
		obj.CPUCFSQuota = ptr.To(true)
	}
	if obj.CPUCFSQuotaPeriod == nil {
		obj.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	if obj.NodeStatusMaxImages == nil {
		obj.NodeStatusMaxImages = ptr.To[int32](50)
	}
	if obj.MaxOpenFiles == 0 {
		obj.MaxOpenFiles = 1000000
	}
	if obj.ContentType == "" {
		obj.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if obj.KubeAPIQPS == nil {
		obj.KubeAPIQPS = ptr.To[int32](50)
	}
	if obj.KubeAPIBurst == 0 {
		obj.KubeAPIBurst = 100
	}
	if obj.SerializeImagePulls == nil {
		obj.SerializeImagePulls = ptr.To(obj.MaxParallelImagePulls == nil || *obj.MaxParallelImagePulls < 2)
	}
	duration(&obj.EvictionPressureTransitionPeriod, 5*time.Minute)
	if obj.MergeDefaultEvictionSettings == nil {
		obj.MergeDefaultEvictionSettings = ptr.To(false)
	}
	if obj.EnableControllerAttachDetach == nil {
		obj.EnableControllerAttachDetach = ptr.To(true)
	}
	if obj.MakeIPTablesUtilChains == nil {
		obj.MakeIPTablesUtilChains = ptr.To(true)
	}
	if obj.IPTablesMasqueradeBit == nil {
		obj.IPTablesMasqueradeBit = ptr.To[int32](14)
	}
	if obj.IPTablesDropBit == nil {
		obj.IPTablesDropBit = ptr.To[int32](15)
	}
	if obj.FailSwapOn == nil {
		obj.FailSwapOn = ptr.To(true)
	}
	if obj.ContainerLogMaxSize == "" {
		obj.ContainerLogMaxSize = "10Mi"
	}
	if obj.ContainerLogMaxFiles == nil {
		obj.ContainerLogMaxFiles = ptr.To[int32](5)
	}
	if obj.ContainerLogMaxWorkers == nil {
		obj.ContainerLogMaxWorkers = ptr.To[int32](1)
	}
	if obj.ContainerLogMonitorInterval == nil {
		obj.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if obj.ConfigMapAndSecretChangeDetectionStrategy == "" {
		obj.ConfigMapAndSecretChangeDetectionStrategy = kubeletv1beta1.WatchChangeDetectionStrategy
	}
	if obj.EnforceNodeAllocatable == nil {
		obj.EnforceNodeAllocatable = []string{"pods"}
	}
	if obj.VolumePluginDir == "" {
		obj.VolumePluginDir = DefaultVolumePluginDir
	}
	logsapi.SetRecommendedLoggingConfiguration(&obj.Logging)
	if obj.EnableSystemLogHandler == nil {
		obj.EnableSystemLogHandler = ptr.To(true)
	}
	if obj.EnableProfilingHandler == nil {
		obj.EnableProfilingHandler = ptr.To(true)
	}
	if obj.EnableDebugFlagsHandler == nil {
		obj.EnableDebugFlagsHandler = ptr.To(true)
	}
	if obj.SeccompDefault == nil {
		obj.SeccompDefault = ptr.To(false)
	}
	if obj.FailCgroupV1 == nil {
		obj.FailCgroupV1 = ptr.To(true)
	}
	if obj.MemoryThrottlingFactor == nil {
		obj.MemoryThrottlingFactor = ptr.To(DefaultMemoryThrottlingFactor)
	}
	if obj.RegisterNode == nil {
		obj.RegisterNode = ptr.To(true)
	}
	if obj.LocalStorageCapacityIsolation == nil {
		obj.LocalStorageCapacityIsolation = ptr.To(true)
	}
	if obj.ContainerRuntimeEndpoint == "" {
		obj.ContainerRuntimeEndpoint = DefaultContainerRuntime
	}
	if obj.PodLogsDir == "" {
		obj.PodLogsDir = DefaultPodLogsDir
	}
	if gates.Enabled("KubeletCrashLoopBackOffMax") && obj.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		obj.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: DefaultMaxContainerBackOff}
	}
	if gates.Enabled("KubeletEnsureSecretPulledImages") && obj.ImagePullCredentialsVerificationPolicy == "" {
		obj.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
}
