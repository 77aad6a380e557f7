package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/hostlet/hostlet/provider/mirror"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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
	// Peers are verified whatever the kubeconfig says of the API server:
	// against the cluster CA, by their IP.
	tlsCfg.RootCAs, tlsCfg.ServerName, tlsCfg.InsecureSkipVerify = roots, "", false
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
	// The Node authorizer lets a node read only its own Node: without a
	// grant (the chart's rbac.registryMirror) the list is forbidden, which
	// is said once, plainly, rather than only in the reflector's retries.
	var warned atomic.Bool
	if err := nodes.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) && !warned.Swap(true) {
			log.WithError(err).Warn("registry mirror: this node may not list the Nodes, so it finds no peers and pulls from the registry; grant nodes list and watch to the group system:nodes (the chart's rbac.registryMirror)")
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, nil, err
	}
	synced := make(chan struct{})
	// The blobs in flight are files under the root dir (unlinked as soon
	// as made), on the node's disk rather than a tmpfs /tmp: a layer can
	// be large.
	m = mirror.New(mirror.Config{Peers: mirror.NodePeers{Nodes: nodes.Lister(), Self: name}, TLS: tlsCfg, Synced: synced,
		Self: name, Dir: filepath.Join(o.rootDir, "registry-mirror")})
	return m, func(ctx context.Context) {
		factory.Start(ctx.Done())
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
				close(synced)
			}
		}()
	}, nil
}

// mirrorMetrics are the mirror's collectors, none without it.
func mirrorMetrics(m *mirror.Mirror) []prometheus.Collector {
	if m == nil {
		return nil
	}
	return m.Metrics()
}
