package node

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// registerNode: false: the Node is never created by the node, and what else
// it does with the Node goes through.
func TestWithoutRegistration(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset()
	nodes := WithoutRegistration(client.CoreV1().Nodes())
	_, err := nodes.Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "registerNode is false") {
		t.Fatalf("Create: %v", err)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err == nil {
		t.Fatal("the Node was created")
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := nodes.Get(ctx, "n1", metav1.GetOptions{}); err != nil || n.Name != "n1" {
		t.Fatalf("Get through it: %v %v", n, err)
	}
}
