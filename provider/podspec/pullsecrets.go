package podspec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// pullCredentials turns the pod's imagePullSecrets into per-registry
// credentials (.dockerconfigjson and the older .dockercfg).
func (r *Runtime) pullCredentials(ctx context.Context, pod *v1.Pod) (runtime.Credentials, error) {
	auths := map[string]dockerAuth{}
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
		for host, a := range entries {
			if a.Auth != "" && a.Username == "" {
				if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					a.Username, a.Password, _ = strings.Cut(string(b), ":")
				}
			}
			auths[registryHost(host)] = a
		}
	}
	return func(host string) (string, string, error) {
		if a, ok := auths[registryHost(host)]; ok {
			return a.Username, a.Password, nil
		}
		return "", "", nil
	}, nil
}

// registryHost reduces "https://index.docker.io/v1/" or "host:port/path" to
// the host the resolver asks about.
func registryHost(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	if s == "index.docker.io" || s == "docker.io" {
		return "registry-1.docker.io"
	}
	return s
}
