package provider

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// PodClient wraps the client virtual-kubelet writes pods with. virtual-kubelet
// deletes a pod when its grace period ends, whatever still runs; the kubelet
// instead deletes it once its containers stopped and its terminal phase is
// written. hostlet does the latter itself, so deletions of pods it is still
// terminating are left to it.
func (p *Provider) PodClient(c corev1client.PodsGetter) corev1client.PodsGetter {
	return podsGetter{p: p, c: c}
}

type podsGetter struct {
	p *Provider
	c corev1client.PodsGetter
}

func (g podsGetter) Pods(namespace string) corev1client.PodInterface {
	return podInterface{PodInterface: g.c.Pods(namespace), p: g.p, ns: namespace}
}

type podInterface struct {
	corev1client.PodInterface
	p  *Provider
	ns string
}

// Delete is virtual-kubelet's removal of a pod whose grace period ended; it
// names the pod's UID in its preconditions, which decides whose worker is
// asked (never an older or newer pod of the same name).
func (pi podInterface) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	pi.p.mu.Lock()
	var running bool
	if opts.Preconditions != nil && opts.Preconditions.UID != nil {
		_, running = pi.p.pods[*opts.Preconditions.UID]
	} else {
		_, e := pi.p.current(pi.ns, name)
		running = e != nil
	}
	pi.p.mu.Unlock()
	if running {
		return nil
	}
	return pi.PodInterface.Delete(ctx, name, opts)
}
