package podspec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// CredentialProviders are the node's credential provider plugins
// (credentialprovider.Providers): their credentials for an image.
type CredentialProviders interface {
	Lookup(ctx context.Context, image string, pod credentialprovider.Pod) []credentialprovider.AuthConfig
}

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// pullCredentials are the credentials to try for image, in the kubelet's
// order: the pod's imagePullSecrets (.dockerconfigjson and the older
// .dockercfg) that match it, then the credential provider plugins'; each
// part the most specific registry location first.
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
		var entries map[string]dockerAuth
		switch s.Type {
		case v1.SecretTypeDockerConfigJson:
			var cfg struct {
				Auths map[string]dockerAuth `json:"auths"`
			}
			if err := json.Unmarshal(s.Data[v1.DockerConfigJsonKey], &cfg); err != nil {
				continue
			}
			entries = cfg.Auths
		case v1.SecretTypeDockercfg:
			if err := json.Unmarshal(s.Data[v1.DockerConfigKey], &entries); err != nil {
				continue
			}
		}
		cfg := credentialprovider.DockerConfig{}
		for loc, a := range entries {
			if a.Auth != "" && a.Username == "" {
				if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					a.Username, a.Password, _ = strings.Cut(string(b), ":")
				}
			}
			cfg[loc] = credentialprovider.AuthConfig{Username: a.Username, Password: a.Password}
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
