// Package lifecycle is the per-pod state machine: the order of init, sidecar
// and main containers, restarts and back-off, termination, and the phase and
// conditions the pod reports. It drives a container runtime through the small
// Runtime interface and is pure logic otherwise.
package lifecycle

import (
	"context"
	"time"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ContainerInfo is what the runtime knows of one container instance.
type ContainerInfo struct {
	ID         string
	Name       string
	Attempt    int
	Running    bool
	Exited     bool
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int32
	// Reason of the exit when the runtime knows better than the exit code
	// ("OOMKilled"), and the termination message.
	Reason, Message string
	Image, ImageID  string
	// BackoffApplied and BackoffNext are the crash-loop back-off recorded
	// with RecordBackoff, for adoption after a restart.
	BackoffApplied, BackoffNext time.Duration
	// User is the identity the process runs with (its uid, gid and
	// supplementary groups, as the runtime set them), nil if unknown.
	User *v1.ContainerUser
}

// Failure is a container that could not be started, with the kubelet's
// waiting reason (ErrImagePull, CreateContainerConfigError, ...). When Info is
// set the container was created but its process did not start (StartError).
type Failure struct {
	Reason, Message string
	Info            *ContainerInfo
	// Image is the image a pull failure was for when it is not the
	// container's own: an image volume's, which the pull back-off names.
	Image string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// eventText is what the kubelet's "Error: ..." event says: image failures
// give their reason, everything else its message.
func (f *Failure) eventText() string {
	switch f.Reason {
	case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
		return f.Reason
	}
	return f.Message
}

// Runtime runs a pod's containers. Implementations are safe for concurrent
// use by many pod workers.
type Runtime interface {
	// PrepareSandbox creates the pod's network and shared files if missing
	// and returns the pod IPs. It is idempotent.
	PrepareSandbox(ctx context.Context, pod *v1.Pod) ([]string, error)
	// SandboxReady reports whether the pod's sandbox exists and is intact.
	SandboxReady(pod *v1.Pod) bool
	// TeardownSandbox releases the network; exited containers stay for logs.
	TeardownSandbox(ctx context.Context, pod *v1.Pod) error
	// StartContainer pulls the image if needed, creates and starts attempt.
	StartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int) (ContainerInfo, error)
	// StopContainer stops a container with its stop signal, SIGKILL after
	// grace, and returns once it has exited.
	StopContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	// Containers lists what exists of the pod in the runtime (for adoption).
	Containers(ctx context.Context, pod *v1.Pod) ([]ContainerInfo, error)
	Container(ctx context.Context, id string) (ContainerInfo, error)
	// RecordBackoff keeps a container's crash-loop back-off with it, so a
	// restarted hostlet continues the same schedule; not across a reboot of
	// the host, after which, as with the kubelet (back-off in memory),
	// Containers reports none.
	RecordBackoff(ctx context.Context, id string, applied, next time.Duration) error
	// ResizeContainer configures running container id with c's CPU and
	// memory live; ContainerResources is what it runs with (a container
	// adopted after a restart of hostlet).
	ResizeContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) error
	ContainerResources(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) (v1.ResourceRequirements, error)
	// ResizePodCgroup sets the pod-level limits of pod's resources that
	// grow (grow) or that shrink (!grow): a resize grows the pod before
	// its containers and shrinks it after.
	ResizePodCgroup(ctx context.Context, pod *v1.Pod, grow bool) error
	// Exec runs a command in a running container (probes and hooks); it
	// returns probes.ErrExecTimeout when timeout (if not zero) passes.
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error)
}

// Prober runs a container's probes and lifecycle hooks; *probes.Prober is
// the real one.
type Prober interface {
	// Probe runs a probe handler once, bounded by timeout.
	Probe(ctx context.Context, h *v1.ProbeHandler, t probes.Target, timeout time.Duration) (probes.Result, string)
	// Hook runs a postStart or preStop handler until it returns or ctx ends.
	Hook(ctx context.Context, h *v1.LifecycleHandler, t probes.Target, pod *v1.Pod) (string, error)
	// Start runs a probe worker until ctx ends or its probe is decided.
	Start(ctx context.Context, cfg probes.WorkerConfig)
}

// Recorder emits Kubernetes events about a pod, or about one of its
// containers when container is not empty.
type Recorder interface {
	Event(pod *v1.Pod, container, eventType, reason, message string)
}

// Allocator is the node's side of a pod's in-place resize (the provider's,
// over node.AdmitResize and the allocation records): the worker decides the
// resize and keeps its conditions, and asks the node only whether it has
// room and to keep what it admitted.
type Allocator interface {
	// AdmitResize reports whether the node can give pod the resources its
	// spec now asks for beside the other pods it runs: reason Infeasible
	// (never) or Deferred (not now), with the kubelet's message, when not.
	AdmitResize(pod *v1.Pod) (reason, msg string, ok bool)
	// SaveAllocation records what the node admitted for the pod's
	// containers, across restarts of hostlet.
	SaveAllocation(uid types.UID, a Allocation) error
}
