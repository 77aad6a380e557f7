package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
)

// buildCredProvider builds the test credential provider plugin
// (test/credprovider) into dir under each of names: a provider's binary
// is named as the provider.
func buildCredProvider(t *testing.T, dir string, names ...string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, names[0])
	cmd := exec.CommandContext(ctxT(t), "go", "build", "-o", bin, "./test/credprovider")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building test/credprovider: %v\n%s", err, out)
	}
	for _, n := range names[1:] {
		if err := os.Link(bin, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// A private image pulled through a credential provider plugin, as the
// kubelet's: the plugin (exec'd with its configured args and env) answers
// the registry's credentials and the pod runs without a pull secret; a
// second pod within the answer's cacheDuration does not run it again; a
// failing plugin leaves the pull without credentials, which fails with the
// registry's refusal (ErrImagePull, the Failed event), its stderr in the
// node's log. The pulled image then shows in the node's status.images.
func TestCredentialProviderPlugins(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	reg, err := images.StartRegistry("127.0.0.1:0", &images.BasicAuth{User: "cp-user", Password: "cp-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := cluster.AllowInsecureRegistry(reg.Addr()); err != nil {
		t.Fatal(err)
	}
	img := localImage(t, images.BusyboxRef)
	private, err := reg.Push(ctx, img, "private/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}
	broken, err := reg.Push(ctx, img, "broken/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	buildCredProvider(t, binDir, "good-provider", "broken-provider")
	calls := filepath.Join(dir, "calls")
	config := filepath.Join(dir, "credential-providers.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: good-provider
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["%[1]s/private"]
  defaultCacheDuration: 0s
  args: ["--user", "cp-user", "--calls", %[2]q, "--cache-duration", "10m"]
  env:
  - name: CREDPROVIDER_PASSWORD
    value: cp-pw
- name: broken-provider
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["%[1]s/broken"]
  defaultCacheDuration: 10m
  args: ["--fail", "token service unreachable (test)"]
`, reg.Addr(), calls)), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "hostlet-credprov"
	h := extraNode(t, harness.HostletOptions{NodeName: name, ExtraArgs: []string{
		"--image-credential-provider-config", config,
		"--image-credential-provider-bin-dir", binDir,
	}})
	onNode := func(p *v1.Pod) *v1.Pod { p.Spec.NodeName = name; return p }
	runs := func() []string {
		b, _ := os.ReadFile(calls)
		return strings.Fields(strings.ReplaceAll(string(b), " token=false", ""))
	}
	repo := strings.TrimSuffix(private, ":1.0")
	var imageID string

	t.Run("pull through the plugin", func(t *testing.T) {
		pod := onNode(imagePod(ns, "first", private, v1.PullAlways))
		cluster.CreatePod(t, pod)
		imageID = waitReady(t, ns, pod.Name).Status.ContainerStatuses[0].ImageID
		if got := runs(); len(got) != 1 || got[0] != repo {
			t.Fatalf("plugin runs %q, want one for %s", got, repo)
		}
	})
	t.Run("cached within cacheDuration", func(t *testing.T) {
		// PullAlways: the image is resolved again, with credentials again.
		pod := onNode(imagePod(ns, "second", private, v1.PullAlways))
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		waitEvent(t, ns, pod.Name, "Pulled")
		if got := runs(); len(got) != 1 {
			t.Fatalf("plugin runs %q, want still one (cached for 10m)", got)
		}
	})
	t.Run("failing plugin", func(t *testing.T) {
		pod := onNode(imagePod(ns, "broken", broken, v1.PullAlways))
		cluster.CreatePod(t, pod)
		w := waitWaiting(t, ns, pod.Name, "ErrImagePull")
		t.Logf("ErrImagePull: %s", w.Message)
		prefix := fmt.Sprintf("Failed to pull image %q: ", broken)
		var failed string
		awaitEvent(t, ns, pod.Name, func(reason, msg string) bool {
			failed = msg
			return reason == "Failed" && strings.HasPrefix(msg, prefix)
		})
		if w.Message == "" || !strings.Contains(failed, w.Message) {
			t.Errorf("Failed event %q does not carry the pull error %q", failed, w.Message)
		}
		log, err := os.ReadFile(h.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "token service unreachable (test)") {
			t.Errorf("the plugin's stderr is not in the node's log %s", h.LogPath())
		}
	})
	t.Run("status.images", func(t *testing.T) {
		// The image the pod runs, by its repo digest (its imageID): the
		// busybox content has other names too (the imported one, other
		// tests' registries), and the kubelet lists only 5, digests first.
		if !strings.HasPrefix(imageID, repo+"@sha256:") {
			t.Fatalf("imageID %q", imageID)
		}
		n, err := cluster.WaitForNode(ctx, name, 2*time.Minute, func(n *v1.Node) (bool, error) {
			for _, ci := range n.Status.Images {
				for _, nm := range ci.Names {
					if nm == imageID && ci.SizeBytes > 0 {
						return true, nil
					}
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("%s never in the node's status.images: %v", imageID, err)
		}
		// The kubelet's selection: at most 50, the largest first.
		imgs := n.Status.Images
		if len(imgs) > 50 {
			t.Errorf("%d images listed", len(imgs))
		}
		for i := 1; i < len(imgs); i++ {
			if imgs[i].SizeBytes > imgs[i-1].SizeBytes {
				t.Errorf("status.images not by size: %v before %v", imgs[i-1], imgs[i])
			}
		}
	})
}
