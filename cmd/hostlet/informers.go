package main

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	nodeinformers "k8s.io/client-go/informers/node/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// nodeInformers are the API caches the node reads: its own pods; Services
// cluster-wide (a node may read them) for service environment variables;
// its own Node object, for admission against the labels and taints the
// cluster gave it; RuntimeClasses (a node may read them), for the pods'
// runtime handlers. Secrets and ConfigMaps are fetched per pod, never
// listed: the Node authorizer forbids that.
type nodeInformers struct {
	pods           coreinformers.PodInformer
	services       coreinformers.ServiceInformer
	node           coreinformers.NodeInformer
	runtimeClasses nodeinformers.RuntimeClassInformer

	podFactory, serviceFactory, nodeFactory informers.SharedInformerFactory
}

func newInformers(client kubernetes.Interface, name string) *nodeInformers {
	i := &nodeInformers{
		podFactory: informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", name).String()
			})),
		serviceFactory: informers.NewSharedInformerFactory(client, 0),
		nodeFactory: informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = "metadata.name=" + name })),
	}
	i.pods = i.podFactory.Core().V1().Pods()
	i.services = i.serviceFactory.Core().V1().Services()
	i.node = i.nodeFactory.Core().V1().Nodes()
	// Cluster-wide, as the Services: the kubelet's runtimeClassManager.
	i.runtimeClasses = i.serviceFactory.Node().V1().RuntimeClasses()
	return i
}

// start runs the informers and waits for the Services: pods started before
// would miss their service environment variables. (A pod naming a
// RuntimeClass waits for their cache itself.)
func (i *nodeInformers) start(ctx context.Context) {
	i.podFactory.Start(ctx.Done())
	i.nodeFactory.Start(ctx.Done())
	i.serviceFactory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), i.services.Informer().HasSynced)
}
