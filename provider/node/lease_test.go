package node

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The Lease is renewed every quarter of nodeLeaseDurationSeconds, as the
// kubelet's nodeLeaseRenewIntervalFraction.
func TestLeaseRenewInterval(t *testing.T) {
	for secs, want := range map[int32]time.Duration{40: 10 * time.Second, 10: 2500 * time.Millisecond, 1: 250 * time.Millisecond} {
		if got := LeaseRenewInterval(secs); got != want {
			t.Errorf("LeaseRenewInterval(%d) = %v, want %v", secs, got, want)
		}
	}
}

// The Lease says the configured duration, held by the node and owned by
// its Node.
func TestLeaseDuration(t *testing.T) {
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewLease(ctx, client, "n1", 12).Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{})
		if err == nil {
			if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 12 {
				t.Errorf("leaseDurationSeconds %v, want 12", l.Spec.LeaseDurationSeconds)
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "n1" {
				t.Errorf("holder %v", l.Spec.HolderIdentity)
			}
			if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-1" {
				t.Errorf("owner references %v", l.OwnerReferences)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lease: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
