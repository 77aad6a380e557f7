package join

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// checkNodeName refuses a name that a Ready node holds, unless this host
// already holds that node's identity (a rerun): two hosts under one name
// would fight over the Node. A NotReady node of that name is taken over,
// as kubeadm does.
func checkNodeName(ctx context.Context, client kubernetes.Interface, name string, ours bool) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsForbidden(err) {
		log.Warnf("cannot check whether node %q exists (the token may not get nodes: chart value rbac.getNodes)", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking node name %q: %w", name, err)
	}
	if ours {
		return nil
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			return fmt.Errorf("a Ready node named %q already exists and this host does not hold its identity: choose another --node-name, or run `hostlet leave` on that host first", name)
		}
	}
	log.Warnf("node %q exists but is not Ready: this host takes it over", name)
	return nil
}
