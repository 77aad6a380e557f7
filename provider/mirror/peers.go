package mirror

import (
	"net"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// NodePeers are the cluster's other Nodes, from an informer's cache: each
// at its first InternalIP and the kubelet port it advertises
// (status.daemonEndpoints), where a node with the mirror serves it. No
// discovery system of its own: a node without the mirror answers 403 or
// 404 there and is backed off. Readiness is not asked: a node that is down
// fails fast and is backed off too, and one that lost only its API
// connection can still serve.
type NodePeers struct {
	Nodes corelisters.NodeLister
	// Self is this node's name, never its own peer.
	Self string
}

// Peers lists them.
func (n NodePeers) Peers() []Peer {
	nodes, err := n.Nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []Peer
	for _, node := range nodes {
		if p, ok := peerOf(node); ok && node.Name != n.Self {
			out = append(out, p)
		}
	}
	return out
}

func peerOf(node *v1.Node) (Peer, bool) {
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 || node.DeletionTimestamp != nil {
		return Peer{}, false
	}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP && net.ParseIP(a.Address) != nil {
			return Peer{Name: node.Name, Addr: net.JoinHostPort(a.Address, strconv.Itoa(int(port)))}, true
		}
	}
	return Peer{}, false
}
