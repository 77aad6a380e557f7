package main

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/hostlet/hostlet/provider/join"
	"github.com/hostlet/hostlet/provider/server"
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
