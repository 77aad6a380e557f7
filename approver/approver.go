package approver

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Approver decides on pending kubelet-serving CSRs, one at a time.
type Approver struct {
	client kubernetes.Interface
	csrs   certlisters.CertificateSigningRequestLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	start  func(stop <-chan struct{})
}

// New watches the cluster's CSRs; Run decides on them.
func New(client kubernetes.Interface) (*Approver, error) {
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Certificates().V1().CertificateSigningRequests()
	a := &Approver{
		client: client, csrs: inf.Lister(), synced: inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-serving-approver"}),
		start: factory.Start,
	}
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && isPending(csr) {
			a.queue.Add(csr.Name)
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return a, err
}

// Run decides on CSRs until ctx ends.
func (a *Approver) Run(ctx context.Context) error {
	defer a.queue.ShutDown()
	a.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return ctx.Err()
	}
	log.Info("approving kubelet-serving CSRs of nodes for their own addresses")
	go wait.UntilWithContext(ctx, a.work, time.Second)
	<-ctx.Done()
	return nil
}

func (a *Approver) work(ctx context.Context) {
	for {
		name, quit := a.queue.Get()
		if quit {
			return
		}
		if err := a.Sync(ctx, name); err != nil {
			log.WithError(err).WithField("csr", name).Warn("deciding on the CSR failed: retrying")
			a.queue.AddRateLimited(name)
		} else {
			a.queue.Forget(name)
		}
		a.queue.Done(name)
	}
}

// Sync approves or denies the CSR name if it is a pending kubelet-serving
// one; an error leaves it pending, to be tried again.
func (a *Approver) Sync(ctx context.Context, name string) error {
	csr, err := a.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !isPending(csr) {
		return nil
	}
	d, err := a.decide(ctx, csr)
	if err != nil {
		return err
	}
	csr = csr.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: ReasonApproved,
		Message: "kubelet-serving certificate of a node for its own addresses (hostlet approve-serving)",
	}
	logger := log.WithFields(log.Fields{"csr": name, "requester": csr.Spec.Username})
	if d != nil {
		cond.Type, cond.Reason, cond.Message = certificatesv1.CertificateDenied, d.Reason, d.Message
		logger.WithField("reason", d.Reason).Warnf("denied: %s", d.Message)
	} else {
		logger.Info("approved")
	}
	cond.LastUpdateTime = metav1.Now()
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	_, err = a.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// Changed meanwhile (decided by another replica, or recreated): its update requeues it.
		return nil
	}
	return err
}

// decide is nil to approve, the denial otherwise; an error when it cannot
// tell (the Node could not be read).
func (a *Approver) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*Denial, error) {
	nodeName, req, d := CheckRequest(csr)
	if d != nil {
		return d, nil
	}
	// Read from the API, not a cache: the names must be the Node's now.
	node, err := a.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return deny(ReasonNodeNotFound, "node %s does not exist", nodeName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	return CheckNames(req, node), nil
}
