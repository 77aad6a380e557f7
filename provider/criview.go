package provider

import (
	"time"

	"github.com/hostlet/hostlet/runtime"

	"k8s.io/apimachinery/pkg/types"
)

// SeenAt is when the node first saw the pod of this UID (since hostlet
// started), for its kubernetes.io/config.seen as the kubelet's pod config
// stamps it; false for a pod the node does not run.
func (p *Registry) SeenAt(uid types.UID) (time.Time, bool) {
	e := p.entry(uid)
	if e == nil {
		return time.Time{}, false
	}
	return e.seen, true
}

// ContainerExited hands a container's exit to its pod's worker, as the
// runtime's exit watcher does (the worker ignores an exit it already has):
// the CRI view's RemoveContainer tells it before the container is gone.
func (p *Provider) ContainerExited(st runtime.ContainerStatus) {
	if e := p.entry(types.UID(st.PodUID)); e != nil {
		e.worker.Exited(p.host.ContainerInfo(p.Pod(types.UID(st.PodUID)), st))
	}
}
