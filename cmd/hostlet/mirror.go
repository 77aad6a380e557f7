package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/hostlet/hostlet/provider/mirror"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// newMirror makes the registry mirror's client side (--registry-mirror):
// the other Nodes from an informer of its own (cluster-wide, unlike the
// node's own Node's), which start runs; nil without the flag.
func newMirror(o *options, client kubernetes.Interface, clientTLS *tls.Config, name string) (m *mirror.Mirror, start func(context.Context), err error) {
	if !o.registryMirror {
		return nil, func(context.Context) {}, nil
	}
	if o.clientCA == "" {
		return nil, nil, errors.New("--registry-mirror needs --client-ca-file: the cluster CA the nodes' certificates are checked against")
	}
	caPEM, err := os.ReadFile(o.clientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("--registry-mirror: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("--registry-mirror: no certificate in %s", o.clientCA)
	}
	tlsCfg := clientTLS.Clone()
	tlsCfg.RootCAs, tlsCfg.ServerName = roots, ""
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	// Only what makes a peer is kept of each Node: a cluster's Nodes are
	// large (images, conditions) and many.
	if err := nodes.Informer().SetTransform(func(obj any) (any, error) {
		n, ok := obj.(*v1.Node)
		if !ok {
			return obj, nil
		}
		slim := &v1.Node{ObjectMeta: n.ObjectMeta, Status: v1.NodeStatus{Addresses: n.Status.Addresses, DaemonEndpoints: n.Status.DaemonEndpoints}}
		slim.ManagedFields, slim.Annotations, slim.Labels = nil, nil, nil
		return slim, nil
	}); err != nil {
		return nil, nil, err
	}
	m = mirror.New(mirror.Config{Peers: mirror.NodePeers{Nodes: nodes.Lister(), Self: name}, TLS: tlsCfg})
	return m, func(ctx context.Context) { factory.Start(ctx.Done()) }, nil
}
