package main

import (
	"context"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/devices"
	"github.com/hostlet/hostlet/provider/dra"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/nodecontainers"
	"github.com/hostlet/hostlet/provider/objects"
	"github.com/hostlet/hostlet/provider/podcerts"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// newPodCerts is the kubelet's pod certificate manager, which exists only
// with its gate on (nil without).
func newPodCerts(o *options, client kubernetes.Interface, nodeName string, events provider.Recorder, pods *provider.Registry) *podcerts.Manager {
	if !o.gates.Enabled("PodCertificateRequest") {
		return nil
	}
	return podcerts.New(podcerts.Config{Client: client, NodeName: nodeName, Events: events, Pods: pods})
}

// newGatedPullRecords are the kubelet's image pull records, behind their
// gate (nil without).
func newGatedPullRecords(ctx context.Context, o *options, rt *runtime.Runtime) (*pullrecords.Manager, error) {
	if !o.gates.Enabled("KubeletEnsureSecretPulledImages") {
		return nil, nil
	}
	return newPullRecords(ctx, o, rt)
}

// podspecParts are what the pod spec translation reads and drives.
type podspecParts struct {
	client   kubernetes.Interface
	inf      *nodeInformers
	events   provider.Recorder
	node     *node.Node
	rt       *runtime.Runtime
	pods     *provider.Registry
	devices  *devices.Manager
	claims   *dra.Manager
	csi      *csi.Manager
	swap     podspec.Swap
	creds    podspec.CredentialProviders
	pulls    *pullrecords.Manager // nil with its gate off
	podCerts *podcerts.Manager    // nil with its gate off
	userns   podspec.UsernsRange
	// active are the node's active pods at their allocated resources
	// (allocatedPods).
	active func() ([]*v1.Pod, bool)
	// qos, if set, is qosReserved's QoS memory limits.
	qos *nodecontainers.QOSReserve
}

// qosRuntime is the runtime the pod spec translation is given when
// qosReserved is in effect: its QoS cgroup updates (before a pod's cgroup
// is made, after one is removed) also set the QoS memory limits from the
// active pods, as the kubelet's UpdateCgroups writes both at once.
type qosRuntime struct {
	*runtime.Runtime
	qos    *nodecontainers.QOSReserve
	active func() ([]*v1.Pod, bool)
}

func (q qosRuntime) UpdateQOSCgroups(burstableMilliCPU int64) error {
	if err := q.Runtime.UpdateQOSCgroups(burstableMilliCPU); err != nil {
		return err
	}
	return updateQOSMemory(q.qos, q.active)
}

// updateQOSMemory sets the QoS memory limits from the active pods, once
// they are known.
func updateQOSMemory(qos *nodecontainers.QOSReserve, active func() ([]*v1.Pod, bool)) error {
	pods, ok := active()
	if !ok {
		return nil
	}
	return qos.Update(pods)
}

// newPodspec is the pod spec translation, which the provider runs pods
// through; it reads their newest objects in the provider's registry.
func newPodspec(ctx context.Context, o *options, nodeIP string, p podspecParts) *podspec.Runtime {
	// The kubelet's trust bundle manager exists only with its gate on;
	// without, projected clusterTrustBundle sources fail as with it off.
	var trustBundles podspec.TrustBundles
	if o.gates.Enabled("ClusterTrustBundleProjection") {
		trustBundles = podspec.NewLazyTrustBundles(ctx, p.client, 2*o.maxPods)
	}
	// Unset, not a typed nil, with a gate off.
	var podCerts podspec.PodCertificates
	if p.podCerts != nil {
		podCerts = p.podCerts
	}
	var pulls podspec.PullRecords
	if p.pulls != nil {
		pulls = p.pulls
	}
	// Checked at start (settings): no error is left here.
	oomGroup, _ := podspec.OOMKillGroup(p.rt.Cgroups().V2(), o.kubeletConfig.SingleProcessOOMKill)
	var rt podspec.ContainerRuntime = p.rt
	if p.qos != nil {
		rt = qosRuntime{Runtime: p.rt, qos: p.qos, active: p.active}
	}
	return podspec.New(podspec.Config{
		RootDir: o.rootDir, HostIPs: []string{nodeIP},
		ClusterDNS: o.clusterDNS, ClusterDomain: o.clusterDomain, ResolvConf: o.resolvConf, SeccompDefault: o.seccompDefault, PodPidsLimit: o.podPidsLimit,
		CFSQuota:     podspec.NewCFSQuota(o.cpuCFSQuota, o.cpuCFSQuotaPeriod, o.gates.Enabled("CustomCPUCFSQuotaPeriod")),
		OOMKillGroup: oomGroup,
		// syncFrequency: how often content volumes are rewritten.
		SyncFrequency: o.syncFrequency,
		Puller:        podspec.NewPuller(o.serializeImagePulls, o.kubeletConfig.MaxParallelImagePulls, float32(o.registryQPS), int(o.registryBurst)),
		Objects:       objects.NewCache(ctx, p.client, clock.RealClock{}, objects.MaxIdle(o.syncFrequency)), Services: p.inf.services.Lister(), Events: p.events, Node: p.node, Runtime: rt,
		Pod:     p.pods.Pod,
		Devices: p.devices, Claims: p.claims, ActivePods: p.active, Swap: p.swap,
		PersistentVolumes: p.client.CoreV1(), CSI: p.csi,
		RuntimeClasses: p.inf.runtimeClasses.Lister(), RuntimeClassesSynced: p.inf.runtimeClasses.Informer().HasSynced,
		CredentialProviders: p.creds, PullRecords: pulls,
		TrustBundles: trustBundles, Gates: o.gates, PodCertificates: podCerts,
		TracerProvider: o.tracer, UserNamespaces: p.userns,
	})
}

// idsPerPod is userNamespaces.idsPerPod (file only, as the kubelet's); 0
// when unset.
func (o *options) idsPerPod() int64 {
	if o.kubeletConfig == nil || o.kubeletConfig.UserNamespaces == nil || o.kubeletConfig.UserNamespaces.IDsPerPod == nil {
		return 0
	}
	return *o.kubeletConfig.UserNamespaces.IDsPerPod
}

// allocatedPods are the node's active pods as the QoS cgroups count them:
// the provider's at their allocated resources (an in-place resize counts
// once admitted, not when asked for), and those of the API it has no
// worker for yet (just after a restart) at their spec. ok is false until
// the API's pods are known.
func allocatedPods(api func() ([]*v1.Pod, bool), workers func() ([]*v1.Pod, map[types.UID]bool)) ([]*v1.Pod, bool) {
	pods, ok := api()
	if !ok {
		return nil, false
	}
	out, known := workers()
	for _, p := range pods {
		if !known[p.UID] {
			out = append(out, p)
		}
	}
	return out, true
}
