package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
)

// localImage returns the locally built archive of ref (cached by BuildAll).
func localImage(t *testing.T, ref string) images.Image {
	t.Helper()
	cache := os.Getenv("HOSTLET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "hostlet")
	}
	imgs, err := images.BuildAll(ctxT(t), filepath.Join(cache, "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if img.Ref == ref {
			return img
		}
	}
	t.Fatalf("no image %s", ref)
	return images.Image{}
}

// waitWaiting waits until the pod's first container waits with reason.
func waitWaiting(t *testing.T, ns, name, reason string) *v1.ContainerStateWaiting {
	t.Helper()
	p, err := cluster.WaitForPod(ctxT(t), ns, name, 2*time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) > 0 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("container of %s/%s never waiting with %s: %v", ns, name, reason, err)
	}
	return p.Status.ContainerStatuses[0].State.Waiting
}

func imagePod(ns, name, image string, policy v1.PullPolicy) *v1.Pod {
	p := busybox(ns, name, "sleep", "3600")
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].ImagePullPolicy = policy
	return p
}

// Pulls from a registry that wants basic auth: with the pod's pull secret
// they succeed with Pulling/Pulled events; without, ErrImagePull turns into
// ImagePullBackOff. Pull policies and bad names behave as the kubelet's.
func TestImagePulls(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	reg := privateRegistry(t, &images.BasicAuth{User: "puller", Password: "pw"})
	ref, err := reg.Push(ctx, localImage(t, images.BusyboxRef), "private/busybox:1.0")
	if err != nil {
		t.Fatal(err)
	}
	pullSecret(t, ns, reg.Addr(), "puller", "pw")

	t.Run("with pull secret", func(t *testing.T) {
		pod := imagePod(ns, "authed", ref, v1.PullAlways)
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		cluster.CreatePod(t, pod)
		got := waitReady(t, ns, pod.Name)
		if want := fmt.Sprintf("Pulling image %q", ref); waitEvent(t, ns, pod.Name, "Pulling") != want {
			t.Errorf("no event %q", want)
		}
		pulled := waitEvent(t, ns, pod.Name, "Pulled")
		if !regexp.MustCompile(`^Successfully pulled image "` + regexp.QuoteMeta(ref) + `" in [0-9.]+m?s \([0-9.]+m?s including waiting\)\. Image size: [0-9]+ bytes\.$`).MatchString(pulled) {
			t.Errorf("Pulled event %q", pulled)
		}
		if id := got.Status.ContainerStatuses[0].ImageID; !strings.HasPrefix(id, reg.Addr()+"/private/busybox@sha256:") {
			t.Errorf("imageID %q", id)
		}
	})
	t.Run("present IfNotPresent", func(t *testing.T) {
		// With the secret that pulled it (KubeletEnsureSecretPulledImages:
		// see TestEnsureSecretPulledImages for a pod without).
		pod := imagePod(ns, "cached", ref, v1.PullIfNotPresent)
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		if msg, want := waitEvent(t, ns, pod.Name, "Pulled"), fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", ref); msg != want {
			t.Errorf("Pulled event %q, want %q", msg, want)
		}
	})
	t.Run("without pull secret", func(t *testing.T) {
		pod := imagePod(ns, "denied", ref, v1.PullAlways)
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "ErrImagePull")
		t.Logf("ErrImagePull: %s", w.Message)
		w = waitWaiting(t, ns, pod.Name, "ImagePullBackOff")
		if want := fmt.Sprintf("Back-off pulling image %q", ref); !strings.HasPrefix(w.Message, want) {
			t.Errorf("ImagePullBackOff message %q", w.Message)
		}
		waitEvent(t, ns, pod.Name, "BackOff")
	})
	t.Run("Never and absent", func(t *testing.T) {
		pod := imagePod(ns, "never", reg.Addr()+"/private/absent:1.0", v1.PullNever)
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "ErrImageNeverPull")
		if want := fmt.Sprintf("Container image %q is not present with pull policy of Never", pod.Spec.Containers[0].Image); w.Message != want {
			t.Errorf("message %q, want %q", w.Message, want)
		}
	})
	t.Run("invalid name", func(t *testing.T) {
		pod := imagePod(ns, "invalid", "hostlet.local/Bad_Name:v1", v1.PullIfNotPresent)
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "InvalidImageName")
		t.Logf("InvalidImageName: %s", w.Message)
		waitEvent(t, ns, pod.Name, "InspectFailed")
	})
}
