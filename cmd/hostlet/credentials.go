package main

import (
	"context"

	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/prometheus/client_golang/prometheus"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// credentialProviders are the node's own registry credentials as podspec
// asks them: its docker config files (config.json in --root-dir, ...) and
// the plugins of --image-credential-provider-config, with their metrics.
// As the kubelet, either flag turns the plugins on, and a configuration
// that does not load stops the node.
func credentialProviders(o *options, api kubernetes.Interface) (podspec.CredentialProviders, []prometheus.Collector, error) {
	files := credentialprovider.NewNodeFiles(o.rootDir, clock.RealClock{})
	if o.credentialProviderConfig == "" && o.credentialProviderBinDir == "" {
		return credentialprovider.NodeCredentials{Files: files}, nil, nil
	}
	ps, err := credentialprovider.New(credentialprovider.Config{
		ConfigPath: o.credentialProviderConfig, BinDir: o.credentialProviderBinDir,
		ServiceAccountTokens: o.gates.Enabled("KubeletServiceAccountTokenForCredentialProviders"),
		ServiceAccounts:      serviceAccounts{api}, Clock: clock.RealClock{},
	})
	if err != nil {
		return nil, nil, err
	}
	return credentialprovider.NodeCredentials{Files: files, Plugins: ps}, ps.Metrics(), nil
}

// serviceAccounts reads pods' service accounts and requests their tokens
// with the node's client (the node authorizer lets a node do both for the
// service accounts of its pods).
type serviceAccounts struct{ c kubernetes.Interface }

func (s serviceAccounts) ServiceAccount(ctx context.Context, ns, name string) (*v1.ServiceAccount, error) {
	return s.c.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
}

func (s serviceAccounts) CreateToken(ctx context.Context, ns, name string, req *authv1.TokenRequest) (*authv1.TokenRequest, error) {
	return s.c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, req, metav1.CreateOptions{})
}
