package podspec

import (
	"context"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The tests' words for the volume manager's teardowns and devices.

func (r *Runtime) teardownVolumes(uid string) error {
	return r.volumes.TearDownPod(context.Background(), types.UID(uid))
}

func (r *Runtime) teardownPodVolumes(uid string) (bool, error) {
	return r.volumes.ReleasePod(context.Background(), types.UID(uid))
}

func (r *Runtime) removePodDir(ctx context.Context, uid string) error {
	return r.volumes.TearDownPod(ctx, types.UID(uid))
}

func (r *Runtime) claimDevice(pod *v1.Pod, d v1.VolumeDevice) (runtime.DeviceNode, error) {
	return r.volumes.Device(pod, d)
}
