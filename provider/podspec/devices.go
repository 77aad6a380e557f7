package podspec

import (
	"context"
	"errors"
	"os"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Devices gives a container the device plugins' Allocate answers for its
// devices (provider/devices.Manager).
type Devices interface {
	ContainerAllocations(ctx context.Context, pod *v1.Pod, container string) ([]*pluginapi.ContainerAllocateResponse, error)
}

// containerDevices turns the plugins' answers into what the container is
// created with, as the kubelet's device manager hands them to the runtime:
// env before the container's own (which wins), mounts, device nodes,
// annotations and CDI device names.
func (r *Runtime) containerDevices(ctx context.Context, pod *v1.Pod, c *v1.Container) (env []string, mounts []runtime.Mount, dev runtime.Devices, err error) {
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
