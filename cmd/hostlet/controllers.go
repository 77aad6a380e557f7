package main

import (
	"time"

	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/node"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// newControllers makes virtual-kubelet's pod controller, which hands the
// node's pods to the provider and writes their statuses, and its node
// controller, which registers the Node and writes its status.
func newControllers(o *options, client kubernetes.Interface, prov *provider.Provider, nd *node.Node, inf *nodeInformers) (*vknode.PodController, *vknode.NodeController, error) {
	pc, err := vknode.NewPodController(vknode.PodControllerConfig{
		PodClient: prov.PodClient(client.CoreV1()),
		// virtual-kubelet's own events ("Create pod in provider") are not
		// the kubelet's; hostlet records the kubelet's events itself.
		EventRecorder:             discard{},
		Provider:                  prov,
		PodInformer:               inf.pods,
		SecretInformer:            inf.unused.Secrets(),
		ConfigMapInformer:         inf.unused.ConfigMaps(),
		ServiceInformer:           inf.services,
		SkipDownwardAPIResolution: true,
		// virtual-kubelet's queues otherwise share a 10 QPS bucket per queue:
		// a burst of pods waits on it although creating a pod in hostlet
		// writes nothing. Only failures back off, per pod; API writes are
		// bounded by the client's --kube-api-qps. Status writes stay
		// coalesced per pod (one queue item, the latest status).
		SyncPodsFromKubernetesRateLimiter:    perPodBackoff(),
		DeletePodsFromKubernetesRateLimiter:  perPodBackoff(),
		SyncPodStatusFromProviderRateLimiter: perPodBackoff(),
	})
	if err != nil {
		return nil, nil, err
	}
	// virtual-kubelet writes the status on every change hostlet reports and
	// otherwise every report period; the Lease is the kubelet's own
	// controller (see node.NewLease), not virtual-kubelet's.
	nc, err := vknode.NewNodeController(nd, nd.Object(), client.CoreV1().Nodes(),
		vknode.WithNodePingInterval(o.statusReportFreq))
	if err != nil {
		return nil, nil, err
	}
	return pc, nc, nil
}

func perPodBackoff() workqueue.TypedRateLimiter[any] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[any](5*time.Millisecond, 1000*time.Second)
}

// discard is an EventRecorder that records nothing.
type discard struct{}

func (discard) Event(kruntime.Object, string, string, string)                                      {}
func (discard) Eventf(kruntime.Object, string, string, string, ...any)                             {}
func (discard) AnnotatedEventf(kruntime.Object, map[string]string, string, string, string, ...any) {}
