package podspec

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/credentialprovider"
	"github.com/hostlet/hostlet/provider/objects"
	"github.com/hostlet/hostlet/provider/pullrecords"
	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
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
	r := &Runtime{cfg: Config{Objects: objects.NewClient(client), CredentialProviders: plugins}, rt: rt}
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
	if _, _, _, _, err := r.pull(context.Background(), &v1.Pod{}, "reg.io/team/app:1.0", creds); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rt.tried, users) {
		t.Errorf("tried %v", rt.tried)
	}
	rt.user, rt.tried = "nobody", nil
	_, _, _, _, err := r.pull(context.Background(), &v1.Pod{}, "reg.io/team/app:1.0", creds)
	if err == nil || err.Error() != "[denied team, denied host, denied plugin]" {
		t.Errorf("error %v", err)
	}
	// Nothing matched: one pull without credentials.
	rt.user, rt.tried = "", nil
	r.cfg.CredentialProviders = nil
	if got := r.pullCredentials(context.Background(), pod, "docker.io/library/busybox"); got != nil {
		t.Errorf("credentials %v", got)
	}
	if _, _, _, _, err := r.pull(context.Background(), &v1.Pod{}, "busybox", nil); err != nil || len(rt.tried) != 1 {
		t.Errorf("anonymous pull: %v, %v", err, rt.tried)
	}
}

// presentPullRuntime has one image present (as a pull left it) and
// accepts one user's credentials.
type presentPullRuntime struct {
	pullRuntime
	present bool
}

func (f *presentPullRuntime) GetImage(_ context.Context, ref string) (*runtime.Image, error) {
	if f.present {
		return &runtime.Image{Ref: ref, ID: ref + "@sha256:0123"}, nil
	}
	return nil, errdefs.ErrNotFound
}

func (f *presentPullRuntime) PullImage(ctx context.Context, ref string, creds runtime.Credentials) (*runtime.Image, time.Duration, error) {
	img, took, err := f.pullRuntime.PullImage(ctx, ref, creds)
	if err == nil {
		f.present = true
		img.ID = ref + "@sha256:0123"
	}
	return img, took, err
}

// KubeletEnsureSecretPulledImages through ensurePulled: an image pulled with
// one namespace's secret is not another namespace's without it: re-pulled
// with the pod's credentials (IfNotPresent, refused by the registry), or
// refused as absent (Never); a pod with the same secret's content passes
// without a pull; the node's credentials make it everyone's.
func TestEnsurePulledVerifiesCredentials(t *testing.T) {
	ctx := context.Background()
	secret := func(ns, user string) *v1.Secret {
		return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pull", UID: types.UID(ns + "-uid")}, Type: v1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.io":{"username":"` + user + `","password":"pw"}}}`)}}
	}
	client := fake.NewClientset(secret("a", "alice"), secret("c", "alice"), secret("d", "mallory"))
	pol, _ := pullrecords.NewPolicy("", nil)
	records, err := pullrecords.New(t.TempDir(), pol, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &presentPullRuntime{pullRuntime: pullRuntime{user: "alice"}}
	var events eventList
	r := &Runtime{cfg: Config{Objects: objects.NewClient(client), PullRecords: records, Events: &events}, rt: rt}
	pod := func(ns string, secret bool) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", UID: types.UID(ns)}}
		if secret {
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "pull"}}
		}
		return p
	}
	const image = "reg.io/team/app:1.0"
	reason := func(err error) string {
		var f *lifecycle.Failure
		if errors.As(err, &f) {
			return f.Reason + ": " + f.Message
		}
		return fmt.Sprint(err)
	}

	if _, err := r.ensurePulled(ctx, pod("a", true), "app", image, v1.PullIfNotPresent); err != nil || len(rt.tried) != 1 {
		t.Fatalf("first pull: %v, tried %v", err, rt.tried)
	}
	_, err = r.ensurePulled(ctx, pod("b", false), "app", image, v1.PullIfNotPresent)
	if got := reason(err); got != "ErrImagePull: denied " || len(rt.tried) != 2 {
		t.Errorf("pod without credentials: %s, tried %v", got, rt.tried)
	}
	_, err = r.ensurePulled(ctx, pod("b", false), "app", image, v1.PullNever)
	if got, want := reason(err), `ErrImageNeverPull: Container image "reg.io/team/app:1.0" is not present with pull policy of Never`; got != want {
		t.Errorf("Never without credentials: %s, want %s", got, want)
	}
	_, err = r.ensurePulled(ctx, pod("d", true), "app", image, v1.PullIfNotPresent)
	if got := reason(err); got != "ErrImagePull: denied mallory" {
		t.Errorf("pod with other credentials: %s", got)
	}
	// Another namespace's secret with the same content: no pull.
	n := len(rt.tried)
	if _, err := r.ensurePulled(ctx, pod("c", true), "app", image, v1.PullNever); err != nil || len(rt.tried) != n {
		t.Errorf("pod with the same credentials: %v, tried %v", err, rt.tried)
	}
	if last := events[len(events)-1]; last != `app Normal Pulled: Container image "reg.io/team/app:1.0" already present on machine and can be accessed by the pod` {
		t.Errorf("event %q", last)
	}

	// Preloaded (no record): every pod's under the default policy.
	rt2 := &presentPullRuntime{present: true}
	r2 := &Runtime{cfg: Config{Objects: objects.NewClient(client), PullRecords: records, Events: &events}, rt: rt2}
	if _, err := r2.ensurePulled(ctx, pod("b", false), "app", "reg.io/team/preloaded:1", v1.PullNever); err != nil {
		t.Errorf("preloaded image: %v", err)
	}
}

// HoldLazyCredentials: no lazy pulls here.
func (f *presentPullRuntime) HoldLazyCredentials(context.Context, string, runtime.Credentials) {}
