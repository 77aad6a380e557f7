package node

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
)

// DefaultLeaseDuration is the kubelet's default nodeLeaseDurationSeconds.
const DefaultLeaseDuration = 40

// leaseRenewFraction is the kubelet's nodeLeaseRenewIntervalFraction: the
// Lease is renewed every quarter of its duration, so three renewals may
// fail before it expires.
const leaseRenewFraction = 0.25

// LeaseRenewInterval is how often a Lease of durationSeconds is renewed.
func LeaseRenewInterval(durationSeconds int32) time.Duration {
	return time.Duration(float64(time.Duration(durationSeconds)*time.Second) * leaseRenewFraction)
}

// NewLease is the kubelet's own node Lease controller: a Lease of
// durationSeconds (nodeLeaseDurationSeconds) renewed every quarter of it
// with 4% jitter, create/renew retries backing off from 200 ms to 7 s,
// owner reference to the Node. virtual-kubelet's copy sleeps twice per
// back-off step and stops renewing when Ping fails, so hostlet uses this one.
// client should time out within a renewal interval, as the kubelet's
// heartbeat client does.
func NewLease(ctx context.Context, client kubernetes.Interface, nodeName string, durationSeconds int32) lease.Controller {
	renew := LeaseRenewInterval(durationSeconds)
	onRepeatedFailure := func() {
		log.WithField("node", nodeName).Warn("node lease: repeated renewal failures")
	}
	return lease.NewController(clock.RealClock{}, client, nodeName, durationSeconds, onRepeatedFailure,
		renew, nodeName, v1.NamespaceNodeLease, func(l *coordinationv1.Lease) error {
			// The Node's UID may not be known when the Lease is first
			// created: retry the owner reference on every renewal until set.
			if len(l.OwnerReferences) > 0 {
				return nil
			}
			node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID,
			}}
			return nil
		})
}
