package node

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// WithoutRegistration is nodes for a node that does not register itself,
// the kubelet's registerNode: false: the Node is someone else's to create
// (a cloud's machine controller, an administrator), so Create is refused and
// the node controller, which creates the Node it does not find, tries again
// until the Node exists; from then on it writes the status as the kubelet's
// updateNodeStatus does with the Node it gets.
func WithoutRegistration(nodes corev1client.NodeInterface) corev1client.NodeInterface {
	return unregistered{nodes}
}

type unregistered struct{ corev1client.NodeInterface }

func (unregistered) Create(_ context.Context, node *v1.Node, _ metav1.CreateOptions) (*v1.Node, error) {
	return nil, fmt.Errorf("error getting node %q: nodes %q not found (registerNode is false: the node waits for the Node to be created)", node.Name, node.Name)
}
