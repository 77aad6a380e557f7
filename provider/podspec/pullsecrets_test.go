package podspec

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type fakeProviders struct {
	images []string
	pods   []credentialprovider.Pod
}

func (f *fakeProviders) Lookup(_ context.Context, image string, pod credentialprovider.Pod) []credentialprovider.AuthConfig {
	f.images = append(f.images, image)
	f.pods = append(f.pods, pod)
	return []credentialprovider.AuthConfig{{Username: "plugin"}}
}

// pullRuntime accepts one user's credentials.
type pullRuntime struct {
	ContainerRuntime
	user  string
	tried []string
}

func (f *pullRuntime) PullImage(_ context.Context, ref string, creds runtime.Credentials) (*runtime.Image, time.Duration, error) {
	u := ""
	if creds != nil {
		u, _, _ = creds("any.host")
	}
	f.tried = append(f.tried, u)
	if u != f.user {
		return nil, 0, errors.New("denied " + u)
	}
	return &runtime.Image{Ref: ref}, time.Millisecond, nil
}

// The credentials tried for an image, in the kubelet's order: the pod's
// pull secrets matching it (the more specific location first), then the
// plugins' (asked with the repository, without tag, and the pod); each in
// turn until one works, all errors aggregated when none does.
func TestPullCredentials(t *testing.T) {
	auth := func(u string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":pw")) }
	client := fake.NewClientset(
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Type: v1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.io":{"auth":"` + auth("host") + `"},"other.io":{"username":"other"}}}`)}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}, Type: v1.SecretTypeDockercfg,
			Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"https://reg.io/team":{"username":"team","password":"pw"}}`)}},
	)
	plugins := &fakeProviders{}
	rt := &pullRuntime{user: "plugin"}
	r := &Runtime{cfg: Config{Objects: NewObjects(client), CredentialProviders: plugins}, rt: rt}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec: v1.PodSpec{ServiceAccountName: "sa", ImagePullSecrets: []v1.LocalObjectReference{{Name: "a"}, {Name: "b"}}}}
	creds := r.pullCredentials(context.Background(), pod, "reg.io/team/app:1.0")
	var users []string
	for _, c := range creds {
		users = append(users, c.Username)
	}
	if want := []string{"team", "host", "plugin"}; !reflect.DeepEqual(users, want) {
		t.Errorf("credentials %v, want %v", users, want)
	}
	if want := []string{"reg.io/team/app"}; !reflect.DeepEqual(plugins.images, want) {
		t.Errorf("plugins asked for %v", plugins.images)
	}
	if want := (credentialprovider.Pod{Namespace: "ns", Name: "p", UID: "u1", ServiceAccountName: "sa"}); plugins.pods[0] != want {
		t.Errorf("plugins got pod %+v", plugins.pods[0])
	}
	if _, _, err := r.pull(context.Background(), "reg.io/team/app:1.0", creds); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rt.tried, users) {
		t.Errorf("tried %v", rt.tried)
	}
	rt.user, rt.tried = "nobody", nil
	_, _, err := r.pull(context.Background(), "reg.io/team/app:1.0", creds)
	if err == nil || err.Error() != "[denied team, denied host, denied plugin]" {
		t.Errorf("error %v", err)
	}
	// Nothing matched: one pull without credentials.
	rt.user, rt.tried = "", nil
	r.cfg.CredentialProviders = nil
	if got := r.pullCredentials(context.Background(), pod, "docker.io/library/busybox"); got != nil {
		t.Errorf("credentials %v", got)
	}
	if _, _, err := r.pull(context.Background(), "busybox", nil); err != nil || len(rt.tried) != 1 {
		t.Errorf("anonymous pull: %v, %v", err, rt.tried)
	}
}
