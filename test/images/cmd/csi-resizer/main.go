// Command csi-resizer is a STAND-IN for upstream's
// registry.k8s.io/sig-storage/csi-resizer (kubernetes-csi/external-resizer),
// whose module the Go proxy does not serve. It does the part of
// external-resizer that e2e.test's csi-hostpath deployment needs: for the
// PVCs bound to PVs of its driver (the driver name the CSI socket's
// GetPluginInfo answers) whose spec request exceeds the status capacity,
// it expands the volume as external-resizer v1.x/v2.x does with
// RecoverVolumeExpansionFailure's status fields:
//
//  1. the PVC's status.allocatedResources[storage] is the new size and
//     allocatedResourceStatuses[storage] ControllerResizeInProgress, with a
//     Resizing condition;
//  2. ControllerExpandVolume over the driver's socket;
//  3. the PV's spec.capacity is the new size;
//  4. if the driver answered node_expansion_required: NodeResizePending and
//     a FileSystemResizePending condition, left to the node (the kubelet,
//     or hostlet) to finish; else the PVC's status.capacity is the new size,
//     its resize conditions and resource status removed.
//
// A driver without the EXPAND_VOLUME controller capability whose node
// service has EXPAND_VOLUME gets external-resizer's trivial resizer: no
// controller call, the PV's capacity set to the request and the expansion
// left to the node (node-only expansion). Its claim failed on the node as
// infeasible is resized again to the user's smaller request (the recovery
// of external-resizer's expandAndRecover, case #3 for a driver without
// control-plane expansion).
//
// A failed ControllerExpandVolume leaves a ControllerResizeError condition
// (ControllerResizeInfeasible for an error the driver calls final) and is
// retried with backoff. What it does not do: volume modification
// (VolumeAttributesClass), secrets, the in-use error handling and leader
// election (the deployment runs one replica; their flags are accepted and
// ignored), metrics.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

func main() {
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the driver's CSI socket")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig; in-cluster config when empty")
	timeout := flag.Duration("timeout", 10*time.Second, "timeout of each CSI call")
	workers := flag.Int("workers", 10, "PVCs resized at once")
	// Upstream's flags, accepted so any deployment of it runs unchanged.
	for _, name := range []string{"v", "leader-election-namespace", "leader-election-lease-duration",
		"leader-election-renew-deadline", "leader-election-retry-period", "resync-period", "metrics-address",
		"http-endpoint", "metrics-path", "retry-interval-start", "retry-interval-max", "kube-api-qps", "kube-api-burst",
		"extra-modify-metadata", "feature-gates", "log-format"} {
		flag.String(name, "", "accepted for upstream's external-resizer, ignored")
	}
	for _, name := range []string{"leader-election", "handle-volume-inuse-error"} {
		flag.Bool(name, false, "accepted for upstream's external-resizer, ignored")
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	conn, err := grpc.NewClient("unix://"+*csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	driver, controllerExpand, err := driverName(ctx, conn, *timeout)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("csi-resizer stand-in: driver %s at %s", driver, *csiAddress)
	if !controllerExpand {
		// external-resizer's words, for whoever reads both logs.
		log.Print("The CSI driver supports node resize only, using trivial resizer to handle resize requests")
	}

	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	r := &resizer{
		client:   client,
		csi:      csipb.NewControllerClient(conn),
		trivial:  !controllerExpand,
		driver:   driver,
		timeout:  *timeout,
		pvcs:     factory.Core().V1().PersistentVolumeClaims().Lister(),
		pvs:      factory.Core().V1().PersistentVolumes().Lister(),
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "external-resizer " + driver}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resizer"}),
	}
	enqueue := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	factory.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }})
	// A PV bound later than its PVC was resized: look at the PVC again.
	factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o interface{}) {
			if pv, ok := o.(*v1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
				r.queue.Add(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
			}
		}})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	for i := 0; i < *workers; i++ {
		go r.run(ctx)
	}
	<-ctx.Done()
	r.queue.ShutDown()
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// driverName asks the driver (waiting for its socket) for its name and
// whether it expands volumes in its controller; one that does not must
// expand them on the node (the trivial resizer).
func driverName(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) (string, bool, error) {
	for {
		c, cancel := context.WithTimeout(ctx, timeout)
		info, err := csipb.NewIdentityClient(conn).GetPluginInfo(c, &csipb.GetPluginInfoRequest{})
		var caps *csipb.ControllerGetCapabilitiesResponse
		var nodeCaps *csipb.NodeGetCapabilitiesResponse
		if err == nil {
			caps, err = csipb.NewControllerClient(conn).ControllerGetCapabilities(c, &csipb.ControllerGetCapabilitiesRequest{})
		}
		if err == nil {
			nodeCaps, err = csipb.NewNodeClient(conn).NodeGetCapabilities(c, &csipb.NodeGetCapabilitiesRequest{})
		}
		cancel()
		if err == nil {
			for _, cp := range caps.Capabilities {
				if cp.GetRpc().GetType() == csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME {
					return info.Name, true, nil
				}
			}
			for _, cp := range nodeCaps.Capabilities {
				if cp.GetRpc().GetType() == csipb.NodeServiceCapability_RPC_EXPAND_VOLUME {
					return info.Name, false, nil
				}
			}
			return "", false, fmt.Errorf("driver %s has no EXPAND_VOLUME capability, neither in its controller nor on its node", info.Name)
		}
		log.Printf("waiting for the driver: %v", err)
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

type resizer struct {
	client kubernetes.Interface
	csi    csipb.ControllerClient
	// trivial: the driver expands only on the node (external-resizer's
	// trivialResizer): no ControllerExpandVolume.
	trivial  bool
	driver   string
	timeout  time.Duration
	pvcs     corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[string]
}

func (r *resizer) run(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		if err := r.sync(ctx, key); err != nil {
			log.Printf("%s: %v (retried)", key, err)
			r.queue.AddRateLimited(key)
		} else {
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

// sync expands the PVC key's volume if it needs it.
func (r *resizer) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := r.pvcs.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	pv, err := r.pvs.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.driver {
		return nil
	}
	want := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	have := pvc.Status.Capacity[v1.ResourceStorage]
	if want.Cmp(have) <= 0 {
		return nil
	}
	st := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	if pvSize := pv.Spec.Capacity[v1.ResourceStorage]; r.trivial && st == v1.PersistentVolumeClaimNodeResizeInfeasible && pvSize.Cmp(want) >= 0 {
		// The node could not expand it to the allocated size and the
		// user asked for less since: that size, as external-resizer
		// resets a node-only expansion for the kubelet to retry.
		return r.expand(ctx, pvc, pv, want)
	}
	switch st {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress, v1.PersistentVolumeClaimNodeResizeInfeasible:
		// The controller's part is done for this size; the node finishes
		// it. A larger request than the one allocated expands again.
		if alloc, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok && want.Cmp(alloc) <= 0 {
			return nil
		}
	}
	return r.expand(ctx, pvc, pv, want)
}

func (r *resizer) expand(ctx context.Context, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, size resource.Quantity) error {
	pvc, err := r.patchClaim(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) {
		setAllocated(s, size, v1.PersistentVolumeClaimControllerResizeInProgress)
		s.Conditions = setCondition(s.Conditions, v1.PersistentVolumeClaimResizing, "", "")
	})
	if err != nil {
		return err
	}
	r.recorder.Eventf(pvc, v1.EventTypeNormal, "Resizing", "External resizer is resizing volume %s", pv.Name)

	resp, err := r.controllerExpand(ctx, pv, size)
	if err != nil {
		r.recorder.Eventf(pvc, v1.EventTypeWarning, "VolumeResizeFailed", "resize volume %q by resizer %q failed: %v", pv.Name, r.driver, err)
		_, perr := r.patchClaim(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) {
			if final(err) {
				setAllocated(s, size, v1.PersistentVolumeClaimControllerResizeInfeasible)
			}
			s.Conditions = setCondition(removeCondition(s.Conditions, v1.PersistentVolumeClaimResizing),
				v1.PersistentVolumeClaimControllerResizeError, "", fmt.Sprintf("resize volume %q by resizer %q failed: %v", pv.Name, r.driver, err))
		})
		if perr != nil {
			log.Printf("%s/%s: %v", pvc.Namespace, pvc.Name, perr)
		}
		return err
	}
	got := size
	if resp.CapacityBytes > size.Value() {
		got = *resource.NewQuantity(resp.CapacityBytes, resource.BinarySI)
	}
	if err := r.patchVolume(ctx, pv, got); err != nil {
		return err
	}
	if resp.NodeExpansionRequired {
		_, err = r.patchClaim(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) {
			setAllocated(s, size, v1.PersistentVolumeClaimNodeResizePending)
			s.Conditions = setCondition(removeCondition(removeCondition(s.Conditions, v1.PersistentVolumeClaimResizing),
				v1.PersistentVolumeClaimControllerResizeError), v1.PersistentVolumeClaimFileSystemResizePending, "",
				"Waiting for user to (re-)start a pod to finish file system resize of volume on node.")
		})
		if err == nil {
			r.recorder.Eventf(pvc, v1.EventTypeNormal, "FileSystemResizeRequired", "Require file system resize of volume on node")
		}
		return err
	}
	_, err = r.patchClaim(ctx, pvc, func(s *v1.PersistentVolumeClaimStatus) {
		if s.Capacity == nil {
			s.Capacity = v1.ResourceList{}
		}
		s.Capacity[v1.ResourceStorage] = got
		delete(s.AllocatedResourceStatuses, v1.ResourceStorage)
		for _, t := range []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimResizing,
			v1.PersistentVolumeClaimFileSystemResizePending, v1.PersistentVolumeClaimControllerResizeError} {
			s.Conditions = removeCondition(s.Conditions, t)
		}
	})
	if err == nil {
		r.recorder.Eventf(pvc, v1.EventTypeNormal, "VolumeResizeSuccessful", "Resize volume succeeded")
	}
	return err
}

// controllerExpand is ControllerExpandVolume, or the trivial resizer's
// answer: the size asked for, to be expanded on the node.
func (r *resizer) controllerExpand(ctx context.Context, pv *v1.PersistentVolume, size resource.Quantity) (*csipb.ControllerExpandVolumeResponse, error) {
	if r.trivial {
		return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size.Value(), NodeExpansionRequired: true}, nil
	}
	req := &csipb.ControllerExpandVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size.Value()}, VolumeCapability: capability(pv)}
	c, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.csi.ControllerExpandVolume(c, req)
}

// final: errors after which external-resizer does not retry the size.
func final(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound, codes.Unimplemented:
		return true
	}
	return false
}

func capability(pv *v1.PersistentVolume) *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	for _, m := range pv.Spec.AccessModes {
		switch m {
		case v1.ReadWriteMany:
			c.AccessMode.Mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case v1.ReadOnlyMany:
			c.AccessMode.Mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case v1.ReadWriteOncePod:
			c.AccessMode.Mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
			FsType: pv.Spec.CSI.FSType, MountFlags: pv.Spec.MountOptions}}
	}
	return c
}

func setAllocated(s *v1.PersistentVolumeClaimStatus, size resource.Quantity, st v1.ClaimResourceStatus) {
	if s.AllocatedResources == nil {
		s.AllocatedResources = v1.ResourceList{}
	}
	s.AllocatedResources[v1.ResourceStorage] = size
	if s.AllocatedResourceStatuses == nil {
		s.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	s.AllocatedResourceStatuses[v1.ResourceStorage] = st
}

func setCondition(cs []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType, reason, msg string) []v1.PersistentVolumeClaimCondition {
	now := metav1.Now()
	cs = removeCondition(cs, t)
	return append(cs, v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now,
		LastProbeTime: now, Reason: reason, Message: msg})
}

func removeCondition(cs []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) []v1.PersistentVolumeClaimCondition {
	var out []v1.PersistentVolumeClaimCondition
	for _, c := range cs {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// patchClaim patches the PVC's status (the verb external-resizer's RBAC
// grants) with what change makes of it.
func (r *resizer) patchClaim(ctx context.Context, pvc *v1.PersistentVolumeClaim, change func(*v1.PersistentVolumeClaimStatus)) (*v1.PersistentVolumeClaim, error) {
	next := pvc.DeepCopy()
	change(&next.Status)
	patch, err := twoWay(pvc, next, v1.PersistentVolumeClaim{})
	if err != nil {
		return nil, err
	}
	return r.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

func (r *resizer) patchVolume(ctx context.Context, pv *v1.PersistentVolume, size resource.Quantity) error {
	next := pv.DeepCopy()
	next.Spec.Capacity[v1.ResourceStorage] = size
	patch, err := twoWay(pv, next, v1.PersistentVolume{})
	if err != nil {
		return err
	}
	_, err = r.client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

func twoWay(old, next, schema interface{}) ([]byte, error) {
	o, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	n, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(o, n, schema)
}
