package main

import (
	"context"
	"fmt"
	"time"

	"github.com/distribution/reference"

	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/provider/podspec"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"
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

// newPullRecords is the kubelet's image pull manager: the policy of
// imagePullCredentialsVerificationPolicy and its allowlist, the records
// under --root-dir/image_manager, and the pulls a restart interrupted
// turned into records of the images they left.
func newPullRecords(ctx context.Context, o *options, rt *runtime.Runtime) (*pullrecords.Manager, error) {
	policy, err := pullrecords.NewPolicy(o.kubeletConfig.ImagePullCredentialsVerificationPolicy, o.kubeletConfig.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, fmt.Errorf("failed to create image pull credentials verification policy: %w", err)
	}
	m, err := pullrecords.New(o.rootDir, policy, clock.RealClock{})
	if err != nil {
		return nil, fmt.Errorf("failed to create image pull records: %w", err)
	}
	m.Recover(func(image string) (string, bool) {
		img, err := rt.GetImage(ctx, image)
		if err != nil {
			return "", false
		}
		return podspec.ImageRef(img), true
	})
	return m, nil
}

// prunePullRecords removes the pull records of images gone, as the
// kubelet's post-GC hook; the records are keyed by repository digest
// (podspec.ImageRef), so every name of every image left counts.
func prunePullRecords(ctx context.Context, rt *runtime.Runtime, pulls *pullrecords.Manager, began time.Time) {
	imgs, err := rt.ListImages(ctx)
	if err != nil {
		log.WithError(err).Warn("Listing images to prune the image pull records")
		return
	}
	var refs []string
	for _, img := range imgs {
		for _, n := range img.Names {
			if named, err := reference.ParseNormalizedNamed(n); err == nil {
				refs = append(refs, reference.TrimNamed(named).String()+"@"+img.ID)
			}
		}
		refs = append(refs, img.ID)
	}
	pulls.Prune(refs, began)
}
