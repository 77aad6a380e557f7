package podspec

import (
	"context"
	"fmt"
	"time"

	"github.com/distribution/reference"
	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/runtime"
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
		s, err := objs.secret(ctx, ref.Name)
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
// authenticates with, as CRI does with the one the kubelet passes.
func (r *Runtime) pull(ctx context.Context, image string, creds []credentialprovider.AuthConfig) (*runtime.Image, time.Duration, error) {
	if len(creds) == 0 {
		return r.rt.PullImage(ctx, image, nil)
	}
	var errs []error
	var total time.Duration
	for _, a := range creds {
		img, took, err := r.rt.PullImage(ctx, image, func(string) (string, string, error) {
			return a.Username, a.Password, nil
		})
		total += took
		if err == nil {
			return img, total, nil
		}
		errs = append(errs, err)
	}
	return nil, total, utilerrors.NewAggregate(errs)
}
