package e2e

import (
	"context"
	"encoding/base64"
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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// node's log. The node's own config.json in its --root-dir serves too. The
// pulled image then shows in the node's status.images.
func TestCredentialProviderPlugins(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	reg := privateRegistry(t, &images.BasicAuth{User: "cp-user", Password: "cp-pw"})
	img := localImage(t, images.BusyboxRef)
	private, err := reg.Push(ctx, img, "private/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}
	broken, err := reg.Push(ctx, img, "broken/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}
	saImage, err := reg.Push(ctx, img, "sa/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}
	nodeImage, err := reg.Push(ctx, img, "node/cp:1.0")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	buildCredProvider(t, binDir, "good-provider", "broken-provider", "sa-provider")
	calls := filepath.Join(dir, "calls")
	saCalls := filepath.Join(dir, "sa-calls")
	const audience = "hostlet-e2e-registry"
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
- name: sa-provider
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["%[1]s/sa"]
  defaultCacheDuration: 10m
  args: ["--user-from-annotation", "hostlet.test/registry-user", "--calls", %[3]q]
  env:
  - name: CREDPROVIDER_PASSWORD
    value: cp-pw
  tokenAttributes:
    serviceAccountTokenAudience: %[4]s
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: ["hostlet.test/registry-user"]
    cacheType: ServiceAccount
`, reg.Addr(), calls, saCalls, audience)), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "hostlet-credprov"
	// The node's own config.json in its --root-dir, for one repository
	// path only (the other subtests want the registry's refusal).
	rootDir := filepath.Join(cluster.Dir(), "hostlet", name)
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`,
		reg.Addr()+"/node", base64.StdEncoding.EncodeToString([]byte("cp-user:cp-pw")))), 0o600); err != nil {
		t.Fatal(err)
	}
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
	t.Run("service account token", func(t *testing.T) {
		// A node requests tokens for an audience no pod volume names only
		// when RBAC lets it (ServiceAccountNodeAudienceRestriction), as a
		// cloud's provider setup grants it.
		rbac := cluster.Client().RbacV1()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "hostlet-e2e-credprov-audience"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"request-serviceaccounts-token-audience"}, APIGroups: []string{""}, Resources: []string{audience}}}}
		if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "system:node:" + name}}}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = rbac.ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		})
		sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", Namespace: ns,
			Annotations: map[string]string{"hostlet.test/registry-user": "cp-user"}}}
		if _, err := cluster.Client().CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := onNode(imagePod(ns, "sa-token", saImage, v1.PullAlways))
		pod.Spec.ServiceAccountName = sa.Name
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
		b, _ := os.ReadFile(saCalls)
		if got, want := strings.TrimSpace(string(b)), strings.TrimSuffix(saImage, ":1.0")+" token=true"; got != want {
			t.Errorf("plugin runs %q, want %q", got, want)
		}
		// The default service account lacks the required annotation: the
		// plugin is not run, the pull has no credentials.
		pod = onNode(imagePod(ns, "sa-default", saImage, v1.PullAlways))
		cluster.CreatePod(t, pod)
		waitWaiting(t, ns, pod.Name, "ErrImagePull")
		if b2, _ := os.ReadFile(saCalls); string(b2) != string(b) {
			t.Errorf("plugin ran for a service account without the required annotation: %q", b2)
		}
	})
	t.Run("node config.json", func(t *testing.T) {
		pod := onNode(imagePod(ns, "node-file", nodeImage, v1.PullAlways))
		cluster.CreatePod(t, pod)
		waitReady(t, ns, pod.Name)
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
