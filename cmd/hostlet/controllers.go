package main

import (
	"github.com/hostlet/hostlet/provider/node"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	"k8s.io/client-go/kubernetes"
)

// newNodeController makes virtual-kubelet's node controller, which
// registers the Node and writes its status: on every change hostlet
// reports and otherwise every report period. The Lease is the kubelet's
// own controller (see node.NewLease), and the pods are podsync's.
// With --register-node=false it never creates the Node: it waits for it.
func newNodeController(o *options, client kubernetes.Interface, nd *node.Node) (*vknode.NodeController, error) {
	nodes := client.CoreV1().Nodes()
	if !o.registerNode {
		nodes = node.WithoutRegistration(nodes)
	}
	return vknode.NewNodeController(nd, nd.Object(), nodes,
		vknode.WithNodePingInterval(o.statusReportFreq))
}
