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

// start runs the informers. It does not wait for them: the node registers
// meanwhile (client-go's sync wait polls every 100 ms, a third of a join's
// time to Ready, for a list that takes a few).
func (i *nodeInformers) start(ctx context.Context) {
	i.podFactory.Start(ctx.Done())
	i.nodeFactory.Start(ctx.Done())
	i.serviceFactory.Start(ctx.Done())
}

// servicesSynced waits for the Services (false if ctx ended first): the
// API's pods start after it, as pods started before would miss their
// service environment variables. (A pod naming a RuntimeClass waits for
// their cache itself.)
func (i *nodeInformers) servicesSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), i.services.Informer().HasSynced)
}
