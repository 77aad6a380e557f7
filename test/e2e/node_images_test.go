package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/hostlet/hostlet/test/harness"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// status.images follows containerd's images: one imported (a unique
// one-file image, as a pull would add it) is listed with its name, tag and
// repo digest, and removed it goes, without waiting for a status round
// (containerd's image events). The list is the kubelet's: at most 50, the
// largest first.
func TestNodeStatusImages(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Images) >= 50 {
		t.Skipf("the node lists %d images already: a small new one would not be among the 50 largest", len(n.Status.Images))
	}
	ref := fmt.Sprintf("hostlet.local/status-images:%d", time.Now().UnixNano())
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := harness.WriteBinaryImage(archive, ref, "data", []byte(ref)); err != nil {
		t.Fatal(err)
	}
	if err := cluster.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	listed := func(want bool) func(*v1.Node) (bool, error) {
		return func(n *v1.Node) (bool, error) {
			for _, ci := range n.Status.Images {
				for _, nm := range ci.Names {
					if nm == ref {
						return want && ci.SizeBytes > 0 && len(ci.Names) == 2, nil
					}
				}
			}
			return !want, nil
		}
	}
	n, err = cluster.WaitForNode(ctx, nodeName, 2*time.Minute, listed(true))
	if err != nil {
		t.Fatalf("%s never in status.images (with its repo digest and size): %v", ref, err)
	}
	imgs := n.Status.Images
	if len(imgs) > 50 {
		t.Errorf("%d images listed", len(imgs))
	}
	for i := 1; i < len(imgs); i++ {
		if imgs[i].SizeBytes > imgs[i-1].SizeBytes {
			t.Errorf("status.images not by size: %v before %v", imgs[i-1], imgs[i])
		}
	}
	dctx := namespaces.WithNamespace(ctx, harness.ContainerdNamespace)
	if err := cluster.ContainerdClient().ImageService().Delete(dctx, ref, images.SynchronousDelete()); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForNode(ctx, nodeName, 2*time.Minute, listed(false)); err != nil {
		t.Fatalf("%s still in status.images after its removal: %v", ref, err)
	}
}
