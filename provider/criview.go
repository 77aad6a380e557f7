package provider

import (
	"time"

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
