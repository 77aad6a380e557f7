package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
)

// KubeletEnsureSecretPulledImages (on by default, the policy
// NeverVerifyPreloadedImages): a private image one pod pulled with its
// secret is not another namespace's to run without credentials — re-pulled
// with the pod's (refused by the registry: ErrImagePull) or, with Never,
// reported absent (ErrImageNeverPull); a pod whose own secret is valid runs
// after a pull with it; the records survive a restart of hostlet; an image
// hostlet never pulled (imported) stays every pod's, unless the policy is
// AlwaysVerify.
func TestEnsureSecretPulledImages(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	reg := privateRegistry(t, &images.BasicAuth{User: "owner", Password: "pw",
		Also: []images.BasicAuth{{User: "other-team", Password: "pw2"}}})
	private, err := reg.Push(ctx, localImage(t, images.BusyboxRef), "private/verified:1.0")
	if err != nil {
		t.Fatal(err)
	}
	const name = "hostlet-pullverify"
	h := extraNode(t, harness.HostletOptions{NodeName: name})
	onNode := func(p *v1.Pod) *v1.Pod { p.Spec.NodeName = name; return p }
	secret := func(ns, user, pw string) { t.Helper(); pullSecret(t, ns, reg.Addr(), user, pw) }
	withSecret := func(p *v1.Pod) *v1.Pod {
		p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		return p
	}
	nsA, nsB, nsC := cluster.NewNamespace(t), cluster.NewNamespace(t), cluster.NewNamespace(t)
	secret(nsA, "owner", "pw")
	secret(nsC, "other-team", "pw2")
	presentMsg := fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", private)
	neverMsg := fmt.Sprintf("Container image %q is not present with pull policy of Never", private)

	t.Run("pulled with a secret", func(t *testing.T) {
		pod := onNode(withSecret(imagePod(nsA, "owner", private, v1.PullIfNotPresent)))
		cluster.CreatePod(t, pod)
		waitReady(t, nsA, pod.Name)
		if got := waitEvent(t, nsA, pod.Name, "Pulling"); got != fmt.Sprintf("Pulling image %q", private) {
			t.Errorf("Pulling event %q", got)
		}
		// The record, as the kubelet writes it: the secret's coordinates
		// and its credentials' hash, under the image's repository.
		dir := filepath.Join(h.RootDir(), "image_manager", "pulled")
		files, err := os.ReadDir(dir)
		if err != nil || len(files) == 0 {
			t.Fatalf("no pulled records in %s: %v", dir, err)
		}
		var found bool
		for _, f := range files {
			b, _ := os.ReadFile(filepath.Join(dir, f.Name()))
			if strings.Contains(string(b), `"kind":"ImagePulledRecord"`) && strings.Contains(string(b), `"namespace":"`+nsA+`","name":"regcred"`) {
				found = true
				t.Logf("record: %s", b)
			}
		}
		if !found {
			t.Errorf("no record names %s/regcred in %s", nsA, dir)
		}
	})
	t.Run("another namespace without credentials", func(t *testing.T) {
		pod := onNode(imagePod(nsB, "thief", private, v1.PullIfNotPresent))
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, nsB, pod.Name, "ErrImagePull")
		t.Logf("ErrImagePull: %s", w.Message)
		if got := waitEvent(t, nsB, pod.Name, "Pulling"); got != fmt.Sprintf("Pulling image %q", private) {
			t.Errorf("Pulling event %q: the image present must be pulled with the pod's credentials", got)
		}
		waitWaiting(t, nsB, pod.Name, "ImagePullBackOff")
	})
	t.Run("another namespace without credentials, Never", func(t *testing.T) {
		pod := onNode(imagePod(nsB, "thief-never", private, v1.PullNever))
		cluster.CreatePod(t, pod)
		if w := waitWaiting(t, nsB, pod.Name, "ErrImageNeverPull"); w.Message != neverMsg {
			t.Errorf("message %q, want %q", w.Message, neverMsg)
		}
		if got := waitEvent(t, nsB, pod.Name, "ErrImageNeverPull"); got != neverMsg {
			t.Errorf("event %q, want %q", got, neverMsg)
		}
	})
	t.Run("another namespace with its own secret", func(t *testing.T) {
		pod := onNode(withSecret(imagePod(nsC, "team", private, v1.PullIfNotPresent)))
		cluster.CreatePod(t, pod)
		waitReady(t, nsC, pod.Name)
		// Verified by a pull with its credentials, which the registry took.
		if got := waitEvent(t, nsC, pod.Name, "Pulling"); got != fmt.Sprintf("Pulling image %q", private) {
			t.Errorf("Pulling event %q", got)
		}
		// Now recorded: the next pod of the namespace runs without a pull.
		again := onNode(withSecret(imagePod(nsC, "team-never", private, v1.PullNever)))
		cluster.CreatePod(t, again)
		waitReady(t, nsC, again.Name)
		if got := waitEvent(t, nsC, again.Name, "Pulled"); got != presentMsg {
			t.Errorf("Pulled event %q, want %q", got, presentMsg)
		}
	})
	t.Run("records survive a restart", func(t *testing.T) {
		if err := h.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		pod := onNode(imagePod(nsB, "thief-after", private, v1.PullNever))
		cluster.CreatePod(t, pod)
		if w := waitWaiting(t, nsB, pod.Name, "ErrImageNeverPull"); w.Message != neverMsg {
			t.Errorf("message %q, want %q", w.Message, neverMsg)
		}
		owner := onNode(withSecret(imagePod(nsA, "owner-after", private, v1.PullNever)))
		cluster.CreatePod(t, owner)
		waitReady(t, nsA, owner.Name)
		if got := waitEvent(t, nsA, owner.Name, "Pulled"); got != presentMsg {
			t.Errorf("Pulled event %q, want %q", got, presentMsg)
		}
	})
	t.Run("preloaded image without credentials", func(t *testing.T) {
		// Imported into containerd, never pulled by hostlet: no record,
		// no intent, so every pod's under NeverVerifyPreloadedImages —
		// though a pushed copy of the same content was pulled privately.
		pod := onNode(imagePod(nsB, "preloaded", images.BusyboxRef, v1.PullNever))
		cluster.CreatePod(t, pod)
		waitReady(t, nsB, pod.Name)
		if got, want := waitEvent(t, nsB, pod.Name, "Pulled"), fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", images.BusyboxRef); got != want {
			t.Errorf("Pulled event %q, want %q", got, want)
		}
	})
	t.Run("AlwaysVerify", func(t *testing.T) {
		// The same imported image on a node that verifies every image: no
		// record names it, so a pod must pull it, which Never forbids.
		const strict = "hostlet-pullverify-always"
		extraNode(t, harness.HostletOptions{NodeName: strict, ExtraArgs: []string{
			"--image-pull-credentials-verification-policy", "AlwaysVerify"}})
		pod := imagePod(nsB, "preloaded-strict", images.BusyboxRef, v1.PullNever)
		pod.Spec.NodeName = strict
		cluster.CreatePod(t, pod)
		want := fmt.Sprintf("Container image %q is not present with pull policy of Never", images.BusyboxRef)
		if w := waitWaiting(t, nsB, pod.Name, "ErrImageNeverPull"); w.Message != want {
			t.Errorf("message %q, want %q", w.Message, want)
		}
	})
}
