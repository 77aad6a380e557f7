package podspec

import (
	"context"
	"errors"
	"os"

	"github.com/hostlet/hostlet/runtime"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Devices gives a container the device plugins' Allocate answers for its
// devices (provider/devices.Manager).
type Devices interface {
	ContainerAllocations(ctx context.Context, pod *v1.Pod, container string) ([]*pluginapi.ContainerAllocateResponse, error)
}

// Claims is the DRA manager (provider/dra.Manager): claims prepared
// before the sandbox, their CDI devices for the containers that use them,
// and unprepared once the pod is gone.
type Claims interface {
	Prepare(ctx context.Context, pod *v1.Pod) error
	ContainerCDI(pod *v1.Pod, c *v1.Container) []string
	Unprepare(ctx context.Context, uid types.UID)
}

// prepareClaims has the pod's ResourceClaims prepared, with the kubelet's
// event when a driver cannot.
func (r *Runtime) prepareClaims(ctx context.Context, pod *v1.Pod) error {
	if r.cfg.Claims == nil || len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	if err := r.cfg.Claims.Prepare(ctx, pod); err != nil {
		r.event(pod, "", v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: "+err.Error())
		return err
	}
	return nil
}

// reprepareClaims prepares again the claims of a pod whose sandbox exists
// (adopted after a restart of hostlet) when the DRA manager's checkpoint
// does not hold them (it was unreadable): drivers answer
// NodePrepareResources again with the same devices, which its restarted
// containers and the unprepare at cleanup need. Its containers run
// already, so a driver not back yet is only logged.
func (r *Runtime) reprepareClaims(ctx context.Context, pod *v1.Pod) {
	if r.cfg.Claims == nil || len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	if err := r.cfg.Claims.Prepare(ctx, pod); err != nil {
		log.WithError(err).WithFields(log.Fields{"pod": key(pod.Namespace, pod.Name), "uid": pod.UID}).Debug("dra: claims of a running pod not prepared again yet")
	}
}

// containerDevices turns the plugins' answers into what the container is
// created with, as the kubelet's device manager hands them to the runtime:
// env before the container's own (which wins), mounts, device nodes,
// annotations and CDI device names.
func (r *Runtime) containerDevices(ctx context.Context, pod *v1.Pod, c *v1.Container) (env []string, mounts []runtime.Mount, dev runtime.Devices, err error) {
	if r.cfg.Claims != nil {
		dev.CDI = r.cfg.Claims.ContainerCDI(pod, c)
	}
	// Block PVs the container uses through volumeDevices come first, as
	// the kubelet's makeBlockVolumes hands them to the runtime.
	for _, d := range c.VolumeDevices {
		n, err := r.volumes.Device(pod, d)
		if err != nil {
			return nil, nil, dev, err
		}
		dev.Nodes = append(dev.Nodes, n)
	}
	if r.cfg.Devices == nil {
		return nil, nil, dev, nil
	}
	resps, err := r.cfg.Devices.ContainerAllocations(ctx, pod, c.Name)
	if err != nil {
		return nil, nil, dev, err
	}
	for _, resp := range resps {
		for k, v := range resp.Envs {
			env = append(env, k+"="+v)
		}
		for _, m := range resp.Mounts {
			// containerd's CRI makes a missing host path a directory;
			// plugins (the upstream sample one) rely on it.
			if _, err := os.Stat(m.HostPath); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(m.HostPath, 0o755); err != nil {
					return nil, nil, dev, err
				}
			}
			mounts = append(mounts, runtime.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
		}
		for _, d := range resp.Devices {
			dev.Nodes = append(dev.Nodes, runtime.DeviceNode{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
		}
		for k, v := range resp.Annotations {
			if dev.Annotations == nil {
				dev.Annotations = map[string]string{}
			}
			dev.Annotations[k] = v
		}
		for _, d := range resp.CdiDevices {
			dev.CDI = append(dev.CDI, d.Name)
		}
	}
	return env, mounts, dev, nil
}
