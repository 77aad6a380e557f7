package podspec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/distribution/reference"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/runtime"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// CredentialProviders are the node's own credentials
// (credentialprovider.NodeCredentials: its docker config files, then the
// credential provider plugins) for an image.
type CredentialProviders interface {
	Lookup(ctx context.Context, image string, pod credentialprovider.Pod) []credentialprovider.AuthConfig
}

// pullCredentials are the credentials to try for image, in the kubelet's
// order: the pod's imagePullSecrets (.dockerconfigjson and the older
// .dockercfg) that match it, then the node's (its docker config files, the
// credential provider plugins'); each part the most specific registry
// location first.
func (r *Runtime) pullCredentials(ctx context.Context, pod *v1.Pod, image string) []credentialprovider.AuthConfig {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	repo := named.Name() // the keyring is asked without tag or digest
	secrets := &credentialprovider.Keyring{}
	objs := r.objects(pod.Namespace)
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := objs.Secret(ctx, ref.Name)
		if err != nil {
			// The kubelet proceeds without a missing pull secret.
			r.event(pod, "", v1.EventTypeWarning, "FailedToRetrieveImagePullSecret",
				fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", ref.Name))
			continue
		}
		var cfg credentialprovider.DockerConfig
		switch b := s.Data[v1.DockerConfigJsonKey]; {
		case s.Type == v1.SecretTypeDockerConfigJson && len(b) > 0:
			cfg, err = credentialprovider.ParseDockerConfigJSON(b)
		case s.Type == v1.SecretTypeDockercfg && len(s.Data[v1.DockerConfigKey]) > 0:
			cfg, err = credentialprovider.ParseDockercfg(s.Data[v1.DockerConfigKey])
		}
		if err != nil {
			// The kubelet fails the pull on such a secret; it is skipped here.
			continue
		}
		// Marked as this secret's: an image it pulls is recorded as pulled
		// with it (KubeletEnsureSecretPulledImages).
		src := &credentialprovider.Source{Secret: &credentialprovider.Coordinates{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name}}
		for loc, a := range cfg {
			a.Source = src
			cfg[loc] = a
		}
		secrets.Add(cfg)
	}
	out := secrets.Lookup(repo)
	if r.cfg.CredentialProviders != nil {
		out = append(out, r.cfg.CredentialProviders.Lookup(ctx, repo, credentialprovider.Pod{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ServiceAccountName: pod.Spec.ServiceAccountName,
		})...)
	}
	return out
}

// pull pulls image as the kubelet's runtime manager: without credentials
// when none matched, else with each in turn until one works, the errors of
// all tried aggregated. Each credential is offered to every host the pull
// authenticates with, as CRI does with the one the kubelet passes. used is
// the credential that worked (nil: none was tried); total the pulls' time,
// waited the time before it was the pull's turn (the Puller's).
func (r *Runtime) pull(ctx context.Context, pod *v1.Pod, image string, creds []credentialprovider.AuthConfig) (img *runtime.Image, total, waited time.Duration, used *credentialprovider.AuthConfig, err error) {
	ctx, span := r.tracer().Start(ctx, "pullImage", trace.WithAttributes(
		append(lifecycle.PodAttributes(pod), attribute.String("image", image))...))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	// One pull, all the credentials it tries, is one turn of the
	// kubelet's puller, as its PullImage tries them all.
	waited, err = r.cfg.Puller.Pull(ctx, func() error {
		img, total, used, err = r.pullWith(ctx, image, creds)
		return err
	})
	return img, total, waited, used, err
}

// pullWith pulls image with no credentials, or with each of creds in turn
// until one works.
func (r *Runtime) pullWith(ctx context.Context, image string, creds []credentialprovider.AuthConfig) (img *runtime.Image, total time.Duration, used *credentialprovider.AuthConfig, err error) {
	if len(creds) == 0 {
		img, took, err := r.rt.PullImage(ctx, image, nil)
		return img, took, nil, err
	}
	var errs []error
	for i := range creds {
		a := &creds[i]
		img, took, err := r.rt.PullImage(ctx, image, func(string) (string, string, error) {
			return a.Username, a.Password, nil
		})
		total += took
		if err == nil {
			return img, total, a, nil
		}
		errs = append(errs, err)
	}
	return nil, total, nil, utilerrors.NewAggregate(errs)
}

// tracer is where pull spans go: none without a TracerProvider.
func (r *Runtime) tracer() trace.Tracer {
	if r.cfg.TracerProvider == nil {
		return noop.Tracer{}
	}
	return r.cfg.TracerProvider.Tracer(instrumentationScope)
}

// instrumentationScope names hostlet's spans' tracer, as the kubelet's
// "k8s.io/kubernetes/pkg/kubelet".
const instrumentationScope = "github.com/hostlet/hostlet/provider/podspec"

// PullRecords are the kubelet's image pull records (pullrecords.Manager):
// which credentials pulled each image, and whether a pod must pull an
// image present to prove its own.
type PullRecords interface {
	MustAttemptPull(image, imageRef string, pod pullrecords.PodCredentials) bool
	RecordIntent(image string) error
	RecordPulled(image, imageRef string, creds *pullrecords.Credentials)
	RecordFailed(image string)
}

// podCredentials are the pod's own among creds, as the kubelet's
// getPodCredentials: its secrets with their content's hash, and the first
// service account a plugin was given a token of; the node's are no pod's.
func podCredentials(creds []credentialprovider.AuthConfig) ([]pullrecords.Secret, *pullrecords.ServiceAccount) {
	var secrets []pullrecords.Secret
	var sa *pullrecords.ServiceAccount
	for _, a := range creds {
		switch {
		case a.Source == nil:
		case a.Source.Secret != nil:
			c := a.Source.Secret
			secrets = append(secrets, pullrecords.Secret{UID: c.UID, Namespace: c.Namespace, Name: c.Name, CredentialHash: credentialHash(a)})
		case a.Source.ServiceAccount != nil && sa == nil:
			c := a.Source.ServiceAccount
			sa = &pullrecords.ServiceAccount{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
		}
	}
	return secrets, sa
}

// pulledWith is what a pull with used records, as the kubelet's
// trackedToImagePullCreds: none or the node's make the image every pod's.
func pulledWith(used *credentialprovider.AuthConfig) *pullrecords.Credentials {
	switch {
	case used == nil || used.Source == nil:
		return &pullrecords.Credentials{NodePodsAccessible: true}
	case used.Source.Secret != nil:
		s, _ := podCredentials([]credentialprovider.AuthConfig{*used})
		return &pullrecords.Credentials{KubernetesSecrets: s}
	default:
		_, sa := podCredentials([]credentialprovider.AuthConfig{*used})
		return &pullrecords.Credentials{KubernetesServiceAccounts: []pullrecords.ServiceAccount{*sa}}
	}
}

// credentialHash is the kubelet's hashAuthConfig: SHA-256 of the
// credential as JSON, so that a secret's content is compared, not only its
// name.
func credentialHash(a credentialprovider.AuthConfig) string {
	b, _ := json.Marshal(struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
	}{a.Username, a.Password})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
