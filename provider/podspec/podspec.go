// Package podspec turns a pod's spec into runtime calls (images, env,
// volumes, DNS, security, user namespaces, pull secrets), keeps the pod's
// content volumes and tokens fresh, and removes what it made. Its Runtime is
// the lifecycle's runtime; everything it needs from the node and the cluster
// is passed in a Config.
package podspec

import (
	"context"
	"fmt"
	"time"

	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/kubeletconfig"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/objects"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"github.com/hostlet/hostlet/provider/volumes"
	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/component-base/featuregate"
)

// Config is what the translation reads of the node and the cluster.
type Config struct {
	RootDir       string
	HostIPs       []string
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string // the host's, for dnsPolicy Default
	// SeccompDefault gives containers that name no seccomp profile the
	// runtime's default (the kubelet's seccompDefault).
	SeccompDefault bool
	// PodPidsLimit is the most processes a pod's cgroup holds (the
	// kubelet's podPidsLimit); zero or less: no limit of its own.
	PodPidsLimit int64
	// UserNamespaces is the node's range for pods with hostUsers: false
	// (UserNamespaceRange); zero: the kubelet's default, 65536 per pod.
	UserNamespaces UsernsRange
	// CFSQuota is how CPU limits become CFS quotas (cpuCFSQuota,
	// cpuCFSQuotaPeriod).
	CFSQuota CFSQuota
	// Puller serializes, bounds and throttles image pulls as the
	// kubelet's (nil: none of it).
	Puller *Puller
	// OOMKillGroup has an OOM kill take the whole container (cgroup v2's
	// memory.oom.group), as the kubelet without singleProcessOOMKill
	// (OOMKillGroup).
	OOMKillGroup bool
	// SyncFrequency is the kubelet's syncFrequency: how often a running
	// pod's content volumes are rewritten (jittered up to half again, as
	// the kubelet's pod workers), which bounds how late a ConfigMap or
	// Secret update shows in them. Zero: the kubelet's default, a minute.
	SyncFrequency time.Duration

	// Objects fetches what pods reference (objects.NewCache: one watch per
	// object; objects.NewClient: a GET per read).
	Objects Objects
	// Services, if set, lists Services for service environment variables.
	Services corelisters.ServiceLister
	Events   lifecycle.Recorder
	Node     Node
	Runtime  ContainerRuntime
	// Pod returns the newest object of a pod the node runs, or nil.
	Pod func(uid types.UID) *v1.Pod
	// Devices, if set, has the device plugins' answers for containers
	// that hold devices.
	Devices Devices
	// Claims, if set, prepares pods' ResourceClaims (DRA).
	Claims Claims
	// ActivePods, if set, lists the node's unfinished pods (ok false until
	// known): the burstable QoS cgroup's CPU shares are their requests.
	ActivePods func() ([]*v1.Pod, bool)
	// Swap is the node's swap behavior for containers.
	Swap Swap
	// CSI, if set, publishes pods' CSI volumes (PersistentVolumes with a
	// csi source and inline ephemeral ones).
	CSI volumemanager.CSI
	// PersistentVolumes, if set, reads the claims of pods' volumes and
	// their PersistentVolumes (the node's client).
	PersistentVolumes volumes.API
	// RuntimeClasses resolve pods' runtimeClassName to a runtime handler
	// (a RuntimeClass informer's lister; nil: a pod naming one is
	// refused); RuntimeClassesSynced, if set, says when it has listed them.
	RuntimeClasses       nodelisters.RuntimeClassLister
	RuntimeClassesSynced func() bool
	// CredentialProviders, if set, are the node's credentials for images
	// (docker config files, credential provider plugins), tried after the
	// pod's pull secrets.
	CredentialProviders CredentialProviders
	// PullRecords, if set, are the kubelet's image pull records
	// (KubeletEnsureSecretPulledImages): a pod uses an image present only
	// with credentials that pulled it, or as its policy allows; nil: the
	// gate off, every image present is every pod's.
	PullRecords PullRecords
	// TrustBundles, if set, answers projected clusterTrustBundle sources
	// (the ClusterTrustBundleProjection gate on); nil, they fail as with
	// the kubelet's gate off.
	TrustBundles TrustBundles
	// PodCertificates, if set, holds projected podCertificate sources'
	// keys and certificates (the PodCertificateRequest gate on); nil, they
	// fail as with the kubelet's gate off.
	PodCertificates PodCertificates
	// Gates are the kubelet's feature gates hostlet runs with (EnvFiles,
	// HostnameOverride); nil: their defaults.
	Gates featuregate.FeatureGate
	// TracerProvider, if set, traces image pulls (a pullImage span, child
	// of the worker's sync); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Objects fetches the ConfigMaps, Secrets and service-account tokens a
// pod refers to, each by name: a node may read only what its pods reference.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authv1.TokenRequest) (*authv1.TokenRequest, error)
}

// objects fetches the objects of namespace ns one container start (or one
// volume setup) refers to, each once.
func (r *Runtime) objects(ns string) *objects.Refs { return objects.NewRefs(r.cfg.Objects, ns) }

// Node is what the translation reads of the node.
type Node interface {
	Allocatable() v1.ResourceList
	Capacity() v1.ResourceList
	// NetworkErrors says why the pod network is not ready, or nil.
	NetworkErrors() error
	// Labels are the node's labels as the cluster has them: a
	// PersistentVolume's node affinity is matched against them.
	Labels() map[string]string
}

// ContainerRuntime is what the translation uses of containerd (runtime.Runtime).
type ContainerRuntime interface {
	Sandbox(uid string) (*runtime.Sandbox, error)
	EnsureSandbox(ctx context.Context, cfg runtime.SandboxConfig) (*runtime.Sandbox, error)
	RuntimeHandler(ctx context.Context, name string) (*runtime.RuntimeHandler, error)
	RemoveSandbox(ctx context.Context, uid string) error
	UserNamespacesSupported(ctx context.Context) error
	GetImage(ctx context.Context, ref string) (*runtime.Image, error)
	PullImage(ctx context.Context, ref string, creds runtime.Credentials) (*runtime.Image, time.Duration, error)
	HoldLazyCredentials(ctx context.Context, ref string, creds runtime.Credentials)
	MountImageVolume(ctx context.Context, v runtime.ImageVolume) error
	ReleaseImageVolumes(ctx context.Context, owner string) error
	CreateContainer(ctx context.Context, cfg runtime.ContainerConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, sig unix.Signal, grace time.Duration) error
	ImageStopSignal(ctx context.Context, id string) string
	Exec(ctx context.Context, id string, cmd []string, eio runtime.ExecIO) (int, error)
	SetBackoff(ctx context.Context, id string, applied, next time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context, podUID string) ([]runtime.ContainerStatus, error)
	ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error)
	PIDNamespace(ctx context.Context, id string) (string, error)
	UpdateContainerResources(ctx context.Context, id string, res runtime.Resources) error
	ContainerResources(ctx context.Context, id string) (runtime.Resources, error)
	MemoryUsage(ctx context.Context, id string) (uint64, error)
	LogsDone(id string) <-chan struct{}
	RemoveLogs(namespace, name, uid string)
	EnsurePodCgroup(uid, qos string, res runtime.PodResources) (string, error)
	UpdatePodCgroup(uid, qos string, res runtime.PodResources) error
	PodCgroupState(uid, qos string) (runtime.PodCgroupState, bool, error)
	RemovePodCgroup(uid string) error
	UpdateQOSCgroups(burstableMilliCPU int64) error
}

// gate says whether the kubelet's feature gate name is on.
func (r *Runtime) gate(name string) bool {
	g := r.cfg.Gates
	if g == nil {
		g = defaultGates
	}
	return g.Enabled(featuregate.Feature(name))
}

var defaultGates = kubeletconfig.NewFeatureGate()

// Runtime runs pods as their specs say: it implements lifecycle.Runtime.
type Runtime struct {
	cfg    Config
	rt     ContainerRuntime
	tokens *refresher
	userns *usernsAllocator
	// volumes sets up, finds and tears down the pods' volumes.
	volumes *volumemanager.Manager
}

// New reads the user namespace allocations of the pods under RootDir; Run
// must be called for volumes and tokens to be refreshed.
func New(cfg Config) *Runtime {
	userns := newUsernsAllocator(volumes.NewLayout(cfg.RootDir).PodsDir())
	if cfg.UserNamespaces.PerPod != 0 {
		userns = newUsernsAllocatorIn(volumes.NewLayout(cfg.RootDir).PodsDir(), cfg.UserNamespaces)
	}
	r := &Runtime{cfg: cfg, rt: cfg.Runtime, userns: userns, volumes: newVolumeManager(cfg)}
	r.tokens = newRefresher(r)
	return r
}

// Run refreshes tokens and content volumes until ctx ends.
func (r *Runtime) Run(ctx context.Context) { r.tokens.supervise(ctx) }

// PodUpdated takes a new object of a running pod: changed labels or
// annotations are written to its downward API files at once.
func (r *Runtime) PodUpdated(old, pod *v1.Pod) { r.tokens.podUpdated(old, pod) }

func (r *Runtime) event(pod *v1.Pod, container, eventType, reason, msg string) {
	r.cfg.Events.Event(pod, container, eventType, reason, msg)
}

// newVolumeManager is the volume manager of cfg's node.
func newVolumeManager(cfg Config) *volumemanager.Manager {
	vc := volumemanager.Config{RootDir: cfg.RootDir, PersistentVolumes: cfg.PersistentVolumes, CSI: cfg.CSI}
	// The node's client that reads claims reads volumes' secrets too.
	if sec, ok := cfg.PersistentVolumes.(volumemanager.Secrets); ok {
		vc.Secrets = sec
	}
	if cfg.Node != nil {
		vc.NodeLabels, vc.Allocatable = cfg.Node.Labels, cfg.Node.Allocatable
	}
	return volumemanager.New(vc)
}

// Volumes is the pods' volume manager (the stats summary reads it).
func (r *Runtime) Volumes() *volumemanager.Manager { return r.volumes }

// layout is where the pod's directories are, under RootDir.
func (r *Runtime) layout() volumes.Layout { return volumes.NewLayout(r.cfg.RootDir) }

func (r *Runtime) hostIPs() []string { return r.cfg.HostIPs }

func (r *Runtime) allocatable() v1.ResourceList { return r.cfg.Node.Allocatable() }

// Cleanup removes everything hostlet made for a pod: containers, the
// sandbox (CNI DEL, netns), the pod's cgroup, volumes and logs. An error
// says which volumes are not torn down (still mounted, a driver's
// NodeUnpublish failed): the pod's directory stays and the caller retries.
func (r *Runtime) Cleanup(ctx context.Context, uid, namespace, name string) (err error) {
	l := log.WithFields(log.Fields{"pod": key(namespace, name), "uid": uid})
	// Also run on a goroutine of its own (a delete of a pod without a
	// worker): a panic costs this attempt, which is retried.
	defer func() {
		if p := recover(); p != nil {
			crash.Handle(p, l, nil)
			err = fmt.Errorf("pod cleanup panicked: %v", p)
		}
	}()
	r.tokens.forget(types.UID(uid))
	if r.cfg.PodCertificates != nil {
		r.cfg.PodCertificates.ForgetPod(types.UID(uid))
	}
	if r.cfg.Claims != nil {
		r.cfg.Claims.Unprepare(ctx, types.UID(uid))
	}
	sts, err := r.rt.ListContainers(ctx, uid)
	if err != nil {
		l.WithError(err).Warn("listing containers for cleanup")
	}
	for _, st := range sts {
		if st.State == runtime.StateRunning {
			_ = r.rt.StopContainer(ctx, st.ID, unix.SIGKILL, 0)
		}
		if err := r.rt.RemoveContainer(ctx, st.ID); err != nil {
			l.WithError(err).Warn("removing container")
		}
	}
	if err := r.rt.RemoveSandbox(ctx, uid); err != nil {
		l.WithError(err).Warn("removing sandbox")
	}
	r.removePodCgroup(uid, l)
	// A pod's image volume snapshots are found by its UID: its directory
	// stays, for the orphan sweep to retry, until they are released.
	var volErr error
	if err := r.rt.ReleaseImageVolumes(ctx, uid); err != nil {
		volErr = fmt.Errorf("UnmountVolume.TearDown failed for the image volumes of pod %q: %w", uid, err)
	} else if err := r.volumes.TearDownPod(ctx, types.UID(uid)); err != nil {
		volErr = err
	}
	r.userns.Release(types.UID(uid))
	if namespace != "" {
		r.rt.RemoveLogs(namespace, name, uid)
	}
	return volErr
}

func key(ns, name string) string { return ns + "/" + name }
