package main

import (
	"context"
	"errors"
	"github.com/hostlet/hostlet/provider/volumemanager"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hostlet/hostlet/probes"
	"github.com/hostlet/hostlet/provider"
	"github.com/hostlet/hostlet/provider/diskusage"
	"github.com/hostlet/hostlet/provider/health"
	"github.com/hostlet/hostlet/provider/join"
	"github.com/hostlet/hostlet/provider/mirror"
	"github.com/hostlet/hostlet/provider/node"
	"github.com/hostlet/hostlet/provider/server"
	"github.com/hostlet/hostlet/provider/volumes/csi"
	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// servingCert is the kubelet API's certificate, chosen as the kubelet's
// (InitializeTLS, NewMainKubelet): with --rotate-server-certificates one
// issued through kubelet-serving CSRs and renewed; else the
// --tls-cert-file pair, reloaded when the files change; with neither, a
// self-signed pair made once in <root-dir>/pki and kept.
func (o *options) servingCert(ctx context.Context, name string, client kubernetes.Interface, nodes corelisters.NodeLister) (server.Certificate, error) {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	certDir := filepath.Join(o.rootDir, "pki")
	if o.rotateServerCerts {
		return join.ServingCertManager(ctx, join.ServingConfig{
			NodeName: name, Client: client, CertDir: certDir, CertFile: o.tlsCert, KeyFile: o.tlsKey,
			Addresses: func() []v1.NodeAddress {
				n, err := nodes.Get(name)
				if err != nil {
					return nil
				}
				return n.Status.Addresses
			},
		})
	}
	certFile, keyFile := o.tlsCert, o.tlsKey
	if certFile == "" {
		certFile, keyFile = filepath.Join(certDir, "kubelet.crt"), filepath.Join(certDir, "kubelet.key")
		if err := selfSigned(name, certFile, keyFile); err != nil {
			return nil, err
		}
	}
	return server.NewFileCertificate(ctx, certFile, keyFile)
}

// selfSigned writes a self-signed pair for the node's name unless one is
// there: what a kubelet without serving certificate flags serves, and what
// a cluster that does not verify kubelets accepts.
func selfSigned(name, certFile, keyFile string) error {
	if ok, err := certutil.CanReadCertAndKey(certFile, keyFile); err != nil || ok {
		return err
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey(name, nil, nil)
	if err != nil {
		return err
	}
	if err := certutil.WriteCert(certFile, cert); err != nil {
		return err
	}
	if err := keyutil.WriteKey(keyFile, key); err != nil {
		return err
	}
	log.WithField("certificate", certFile).Info("serving a self-signed certificate (no --tls-cert-file, no --rotate-server-certificates)")
	return nil
}

// serverParts are what the kubelet API serves.
type serverParts struct {
	client  kubernetes.Interface
	prov    *provider.Provider
	inf     *nodeInformers
	rt      *runtime.Runtime
	events  provider.Recorder
	node    *node.Node
	usage   *diskusage.Cache
	csi     *csi.Manager
	volumes *volumemanager.Manager
	metrics []prometheus.Collector
	checks  *health.Checks
	// tls is the TLS versions and suites served, auth how callers are
	// authenticated and authorized (settings).
	tls  server.TLS
	auth server.AuthMode
	// mirror serves the node's content, and the blobs its pulls are
	// fetching, to the other nodes on /v2/ (--registry-mirror); nil
	// without it.
	mirror *mirror.Mirror
	// systemContainers are the stats summary's system containers
	// (nodecontainers.Manager.SystemContainers).
	systemContainers map[string]string
}

// serve starts the kubelet API with its certificate.
func serve(ctx context.Context, o *options, name string, cert server.Certificate, p serverParts) error {
	var mirrorHandler http.Handler
	if p.mirror != nil {
		mirrorHandler = p.mirror.Handler(p.rt)
	}
	return server.Serve(ctx, server.Config{
		Addr: net.JoinHostPort(o.address, strconv.Itoa(int(o.port))),
		Cert: cert, TLS: p.tls, ClientCAFile: o.clientCA, ReadOnlyAddr: readOnlyAddr(o),
		AuthCache: server.AuthCache{TokenTTL: o.authnCacheTTL, AllowedTTL: o.authzAllowedTTL, DeniedTTL: o.authzDeniedTTL},
		Auth:      p.auth, DebuggingDisabled: !o.debuggingHandlers,
		StreamIdleTimeout: o.streamIdleTimeout, StreamCreationTime: 30 * time.Second,
		NodeName: name, Client: p.client, Pods: p.prov, APIPods: p.inf.pods.Lister(), Runtime: p.rt, Events: p.events,
		Node: p.node, Stats: p.rt, Usage: p.usage, Volumes: p.volumes, CSI: p.csi, Cgroups: p.rt, Metrics: p.metrics,
		SystemContainers: p.systemContainers, Mirror: mirrorHandler, NoServer: !o.enableServer,
		ProbeMetrics: []prometheus.Collector{probes.ProbeTotal},
		Profiling:    o.profiling,
		// As the kubelet: block profiling only beside profiling.
		ContentionProfiling: o.profiling && o.contentionProfiling,
		SetVerbosity:        o.debugFlagsSetter(),
		Configz:             o.kubeletConfig,
		Health:              p.checks,
		SystemLogs:          o.systemLogHandler, SystemLogQuery: o.systemLogQuery && o.gates.Enabled("NodeLogQuery"),
	})
}

// readOnlyAddr is where the kubelet's read-only port is served: on
// --address, as the kubelet's; none for port 0 (its default).
func readOnlyAddr(o *options) string {
	if o.readOnlyPort <= 0 {
		return ""
	}
	return net.JoinHostPort(o.address, strconv.Itoa(int(o.readOnlyPort)))
}
