package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	log "github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images/csihostdir"
)

// stsResult is the statefulset scenario on one node.
type stsResult struct {
	replicas int
	// create → each pod Ready (from the StatefulSet's Create), and the
	// last one.
	ready    dist
	allReady time.Duration
	// The split of create → Ready: create → scheduled (the scheduler
	// binds a pod once its WaitForFirstConsumer claim is provisioned and
	// bound: controllers only, the same on both nodes) and scheduled →
	// Ready (the node's share, with the attach by the attach/detach
	// controller and external-attacher it waits for).
	scheduled, nodeSide dist
	// From the StatefulSet's and its claims' Delete: the last pod gone,
	// the last PV deleted (detached and DeleteVolume'd first), the last of
	// the scenario's mounts gone from under the node's root dir.
	allGone, pvsGone, unmounted time.Duration
	startCPU, delCPU            cpuUse
	// mounts is how many more mounts there were under the root dir with
	// all pods Ready.
	mounts int
}

// stsName is the StatefulSet; its pods are sts-0 … sts-<n-1>, its claims
// data-sts-<i>.
const stsName = "sts"

// statefulset: a StatefulSet of -sts-replicas sleepers, each with a claim
// from a volumeClaimTemplate on CSI (our csihostdir driver run on the host
// for the node, with upstream's external-provisioner and external-attacher
// as its controller side; WaitForFirstConsumer, so each volume is
// provisioned for the node the pod is scheduled to), created at once
// (Parallel pod management) → all Ready; then the StatefulSet and its
// claims deleted → all pods gone, all PVs deleted, nothing of it left
// mounted under the node's root dir. The whole volume path is timed: the
// scheduler's binding, provisioning, attach, stage, publish, and back.
func (b *bench) statefulset(ctx context.Context, t target, r *nodeResult) error {
	// A driver of its own per node: the controller side answers
	// ControllerPublishVolume for its node only, and each node registers
	// the driver it has. Short: its registration socket's path in
	// plugins_registry must fit a unix socket address (108 bytes).
	name := strings.TrimPrefix(t.node, "bench-") + ".hostdir.test"
	attach, podInfo := true, true
	drivers := b.cs.StorageV1().CSIDrivers()
	if _, err := drivers.Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &attach, PodInfoOnMount: &podInfo,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer drivers.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	state := filepath.Join(b.cluster.Dir(), "csi-"+t.node)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	socket := filepath.Join(t.rootDir, "plugins", name, "csi.sock")
	dctx, stopDriver := context.WithCancel(ctx)
	defer stopDriver()
	d, err := csihostdir.Start(dctx, csihostdir.Config{Name: name, NodeID: t.node, StateDir: state, Stage: true, Controller: true,
		Endpoint: socket, RegistryDir: filepath.Join(t.rootDir, "plugins_registry")})
	if err != nil {
		return err
	}
	select {
	case reg := <-d.Registered():
		if !reg.Registered {
			return fmt.Errorf("%s refused the CSI driver's registration: %s", t.node, reg.Error)
		}
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s never answered the CSI driver's registration (plugins_registry %s)", t.node, filepath.Join(t.rootDir, "plugins_registry"))
	case <-ctx.Done():
		return ctx.Err()
	}
	log.Infof("[%s] CSI driver %s registered; starting its provisioner and attacher", t.label, name)
	sidecars, err := b.cluster.StartCSISidecars(ctx, socket, t.node)
	if err != nil {
		return err
	}
	defer sidecars.Stop()
	class := t.node + "-csi"
	wffc, del := storagev1.VolumeBindingWaitForFirstConsumer, v1.PersistentVolumeReclaimDelete
	classes := b.cs.StorageV1().StorageClasses()
	if _, err := classes.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Provisioner: name, VolumeBindingMode: &wffc, ReclaimPolicy: &del}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer classes.Delete(context.WithoutCancel(ctx), class, metav1.DeleteOptions{})

	n := b.cfg.stsReplicas
	s := &stsResult{replicas: n}
	r.sts = s
	// Mounts under the root dir before: the scenario must leave no more.
	before, err := mountsUnder(t.rootDir)
	if err != nil {
		return err
	}
	sts := statefulSet(t, class, n)
	var pods []string
	for i := range n {
		pods = append(pods, fmt.Sprintf("%s-%d", stsName, i))
	}
	tr, err := track(ctx, b.cs, t.ns, "statefulset", map[string]cond{"ready": harness.PodReady, "scheduled": podScheduled})
	if err != nil {
		return err
	}
	defer tr.stop()
	timeout := max(3*time.Minute, time.Duration(n)*6*time.Second)
	mark, created := t.cpuMark(), time.Now()
	if _, err := b.cs.AppsV1().StatefulSets(t.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return err
	}
	// A failed measurement must not leave the StatefulSet making pods
	// again while the run's cleanup deletes them.
	defer b.cs.AppsV1().StatefulSets(t.ns).Delete(context.WithoutCancel(ctx), stsName, metav1.DeleteOptions{})
	ready, err := tr.wait(ctx, "ready", pods, timeout)
	if late := (*notMetError)(nil); errors.As(err, &late) {
		log.Errorf("[%s] %v (provisioner log: %s)", t.label, err, sidecars.ProvisionerLog)
		ready, err = tr.times("ready"), nil
	}
	if err != nil {
		return err
	}
	s.startCPU.since(t, mark)
	createdAt := map[string]time.Time{}
	for _, p := range pods {
		createdAt[p] = created
	}
	s.ready, s.allReady = latencies(createdAt, ready), span(createdAt, ready)
	scheduled := tr.times("scheduled")
	s.scheduled, s.nodeSide = latencies(createdAt, scheduled), latencies(scheduled, ready)
	sortDist(s.ready)
	sortDist(s.scheduled)
	sortDist(s.nodeSide)
	// The volumes must be mounted under the root dir, or the wait for
	// their unmounting below would measure nothing.
	now, err := mountsUnder(t.rootDir)
	if err != nil {
		return err
	}
	s.mounts = len(now) - len(before)
	log.Infof("[%s] %d of %d StatefulSet pods Ready after %v, %d more mounts under %s", t.label, len(ready), n,
		s.allReady.Round(time.Millisecond), s.mounts, t.rootDir)
	if s.mounts < len(ready) {
		return fmt.Errorf("%d pods Ready with CSI volumes but %d more mounts under %s: not where the node mounts them", len(ready), s.mounts, t.rootDir)
	}

	// The StatefulSet and its claims deleted at once (the claims stay,
	// protected, until their pods are gone).
	mark, deleted := t.cpuMark(), time.Now()
	if err := b.cs.AppsV1().StatefulSets(t.ns).Delete(ctx, stsName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	for _, p := range pods {
		if err := b.cs.CoreV1().PersistentVolumeClaims(t.ns).Delete(ctx, "data-"+p, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	// The PVs and the mounts have no watch of their own here: polled
	// every 100 ms alongside the pods' watch.
	var wg sync.WaitGroup
	var pvErr, mountErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.pvsGone, pvErr = until(ctx, deleted, timeout, func(ctx context.Context) (bool, error) {
			pvs, err := b.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, pv := range pvs.Items {
				if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == name {
					return false, nil
				}
			}
			return true, nil
		})
	}()
	go func() {
		defer wg.Done()
		s.unmounted, mountErr = until(ctx, deleted, timeout, func(context.Context) (bool, error) {
			now, err := mountsUnder(t.rootDir)
			if err != nil {
				return false, err
			}
			for _, m := range now {
				if !slices.Contains(before, m) {
					return false, nil
				}
			}
			return true, nil
		})
	}()
	goneAt, err := tr.wait(ctx, gone, pods, timeout)
	if late := (*notMetError)(nil); errors.As(err, &late) {
		log.Errorf("[%s] %v", t.label, err)
		goneAt, err = tr.times(gone), nil
	}
	wg.Wait()
	s.delCPU.since(t, mark)
	if err != nil {
		return err
	}
	deletedAt := map[string]time.Time{}
	for _, p := range pods {
		deletedAt[p] = deleted
	}
	s.allGone = span(deletedAt, goneAt)
	r.rounds = append(r.rounds, roundCount{name: fmt.Sprintf("StatefulSet of %d on CSI", n), expected: n, reached: len(ready), gone: len(goneAt)})
	if pvErr != nil {
		return fmt.Errorf("PVs of %s not all deleted: %w (provisioner log: %s)", name, pvErr, sidecars.ProvisionerLog)
	}
	if mountErr != nil {
		return fmt.Errorf("mounts left under %s: %w", t.rootDir, mountErr)
	}
	log.Infof("[%s] StatefulSet gone: pods %v, PVs %v, mounts %v after the delete", t.label,
		s.allGone.Round(time.Millisecond), s.pvsGone.Round(time.Millisecond), s.unmounted.Round(time.Millisecond))
	return nil
}

// statefulSet is the scenario's StatefulSet on node t: sleepers (as the
// bursts'), pinned by nodeSelector (the scheduler must pick the node for
// WaitForFirstConsumer to provision there), each with a 16 MiB claim of
// class mounted at /data.
func statefulSet(t target, class string, n int) *appsv1.StatefulSet {
	pod := sleeperPod("", t.ns, "statefulset", 0)
	spec := pod.Spec
	spec.NodeSelector = map[string]string{v1.LabelHostname: t.node}
	spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	replicas := int32(n)
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: stsName, Namespace: t.ns}, Spec: appsv1.StatefulSetSpec{
		Replicas: &replicas, ServiceName: stsName, PodManagementPolicy: appsv1.ParallelPodManagement,
		Selector: &metav1.LabelSelector{MatchLabels: pod.Labels},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: spec},
		VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}},
		}}},
	}}
}

// podScheduled: the scheduler bound the pod to a node.
func podScheduled(p *v1.Pod) (bool, error) { return p.Spec.NodeName != "", nil }

// mountsUnder lists the mount points under dir.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// until polls done every 100 ms from now and returns how long after from
// it first held.
func until(ctx context.Context, from time.Time, timeout time.Duration, done wait.ConditionWithContextFunc) (time.Duration, error) {
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := done(ctx)
		at = time.Now()
		return ok, err
	})
	return at.Sub(from), err
}

// stsRows are the statefulset scenario's lines of the table.
func stsRows(c config) []row {
	s := func(r *nodeResult) *stsResult {
		if r.sts == nil {
			return &stsResult{}
		}
		return r.sts
	}
	n := c.stsReplicas
	return []row{
		durRow(fmt.Sprintf("StatefulSet of %d on CSI: create → Ready, p50", n), func(r *nodeResult) time.Duration { return s(r).ready.pct(50) }),
		durRow(fmt.Sprintf("StatefulSet of %d: create → all Ready", n), func(r *nodeResult) time.Duration { return s(r).allReady }),
		durRow(fmt.Sprintf("StatefulSet of %d: create → scheduled (claim provisioned and bound), p50", n), func(r *nodeResult) time.Duration { return s(r).scheduled.pct(50) }),
		durRow(fmt.Sprintf("StatefulSet of %d: create → scheduled, slowest", n), func(r *nodeResult) time.Duration { return s(r).scheduled.pct(100) }),
		durRow(fmt.Sprintf("StatefulSet of %d: scheduled → Ready (node, with attach), p50", n), func(r *nodeResult) time.Duration { return s(r).nodeSide.pct(50) }),
		durRow(fmt.Sprintf("StatefulSet of %d: scheduled → Ready, slowest", n), func(r *nodeResult) time.Duration { return s(r).nodeSide.pct(100) }),
		durRow(fmt.Sprintf("StatefulSet of %d: delete (with claims) → all pods gone", n), func(r *nodeResult) time.Duration { return s(r).allGone }),
		durRow(fmt.Sprintf("StatefulSet of %d: delete → all PVs deleted", n), func(r *nodeResult) time.Duration { return s(r).pvsGone }),
		durRow(fmt.Sprintf("StatefulSet of %d: delete → nothing left mounted", n), func(r *nodeResult) time.Duration { return s(r).unmounted }),
		cpuSpanRow(fmt.Sprintf("StatefulSet of %d, start: CPU of the agent", n), func(r *nodeResult) time.Duration { return s(r).startCPU.agent }),
		cpuSpanRow(fmt.Sprintf("StatefulSet of %d, start: CPU of containerd, shims, runc", n), func(r *nodeResult) time.Duration { return s(r).startCPU.runtime }),
		cpuSpanRow(fmt.Sprintf("StatefulSet of %d, delete: CPU of the agent", n), func(r *nodeResult) time.Duration { return s(r).delCPU.agent }),
		cpuSpanRow(fmt.Sprintf("StatefulSet of %d, delete: CPU of containerd, shims, runc", n), func(r *nodeResult) time.Duration { return s(r).delCPU.runtime }),
	}
}
