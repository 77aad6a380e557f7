// Package dra is the kubelet's Dynamic Resource Allocation manager: DRA
// drivers register through the plugin registry dir, and for each pod with
// ResourceClaims the drivers prepare the allocated devices
// (NodePrepareResources) before its containers start and unprepare them
// when it is gone; the CDI devices they answer are applied to the
// containers that use the claims. ResourceSlices are the drivers' own.
package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hostlet/hostlet/provider/grpcsock"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Config is where drivers register and how claims are read.
type Config struct {
	// Client reads ResourceClaims (the Node authorizer lets a node read
	// those of its pods).
	Client kubernetes.Interface
	// Checkpoint is the file what was prepared is kept in across restarts
	// (<root-dir>/CheckpointName); none when empty.
	Checkpoint string
}

type driver struct {
	endpoint     string // the DRA service's socket
	registration string // the registration socket, whose removal ends it
}

// prepared is one claim of a pod as its drivers prepared it.
type prepared struct {
	claim   *resourceapi.ResourceClaim
	devices []*drapb.Device
}

// Manager is the DRA manager.
type Manager struct {
	cfg Config
	mu  sync.Mutex
	// drivers by name.
	drivers map[string]driver
	// pods holds what was prepared, by pod UID and the pod's claim name.
	pods map[types.UID]map[string]prepared
	// gone are pods whose claims a driver did not unprepare (not
	// registered, or it failed): tried again when a driver registers, as
	// the kubelet keeps them in its claim cache until unprepared.
	gone map[types.UID]bool
}

// New reads back what was prepared before a restart; an unreadable
// checkpoint is logged and started afresh (the claims of adopted pods are
// then prepared again, which drivers answer idempotently).
func New(cfg Config) *Manager {
	pods, gone, err := load(cfg.Checkpoint)
	if err != nil {
		log.WithError(err).WithField("file", cfg.Checkpoint).Warn("dra: checkpoint not read; claims of running pods are prepared again")
	}
	return &Manager{cfg: cfg, drivers: map[string]driver{}, pods: pods, gone: gone}
}

// record sets (or with nil, drops) a pod's prepared claims and writes the
// checkpoint; called with m.mu held.
func (m *Manager) record(uid types.UID, claims map[string]prepared) {
	if claims == nil {
		if _, ok := m.pods[uid]; !ok && !m.gone[uid] {
			return
		}
		delete(m.pods, uid)
		delete(m.gone, uid)
	} else {
		m.pods[uid] = claims
	}
	if err := save(m.cfg.Checkpoint, m.pods, m.gone); err != nil {
		log.WithError(err).WithField("file", m.cfg.Checkpoint).Warn("dra: checkpoint not written")
	}
}

// claimName is the ResourceClaim a pod's claim entry stands for: named
// directly, or generated from a template (its name in the pod status).
func claimName(pod *v1.Pod, c *v1.PodResourceClaim) (string, error) {
	if c.ResourceClaimName != nil {
		return *c.ResourceClaimName, nil
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == c.Name && s.ResourceClaimName != nil {
			return *s.ResourceClaimName, nil
		}
	}
	return "", fmt.Errorf("waiting for the ResourceClaim of %q to be created", c.Name)
}

// Prepare has the drivers prepare every claim of the pod, as the kubelet's
// PrepareDynamicResources does before the sandbox: the claim must be
// allocated and reserved for the pod.
func (m *Manager) Prepare(ctx context.Context, pod *v1.Pod) error {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	m.mu.Lock()
	done := len(m.pods[pod.UID]) == len(pod.Spec.ResourceClaims)
	m.mu.Unlock()
	if done {
		return nil
	}
	out := map[string]prepared{}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, err := claimName(pod, pc)
		if err != nil {
			return err
		}
		claim, err := m.cfg.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("failed to fetch ResourceClaim %s referenced by pod %s: %w", name, pod.Name, err)
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s: not allocated", name)
		}
		reserved := false
		for _, r := range claim.Status.ReservedFor {
			reserved = reserved || r.UID == pod.UID
		}
		if !reserved {
			return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, name, claim.UID)
		}
		p := prepared{claim: claim}
		drivers := map[string]bool{}
		for _, r := range claim.Status.Allocation.Devices.Results {
			drivers[r.Driver] = true
		}
		for d := range drivers {
			devs, err := m.prepare(ctx, d, claim)
			if err != nil {
				return err
			}
			p.devices = append(p.devices, devs...)
		}
		out[pc.Name] = p
	}
	m.mu.Lock()
	m.record(pod.UID, out)
	m.mu.Unlock()
	return nil
}

func (m *Manager) client(name string) (drapb.DRAPluginClient, func(), error) {
	m.mu.Lock()
	d, ok := m.drivers[name]
	m.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("DRA driver %s is not registered", name)
	}
	conn, err := grpcsock.Dial(d.endpoint)
	if err != nil {
		return nil, nil, err
	}
	return drapb.NewDRAPluginClient(conn), func() { conn.Close() }, nil
}

func claimRef(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

func (m *Manager) prepare(ctx context.Context, name string, claim *resourceapi.ResourceClaim) ([]*drapb.Device, error) {
	client, done, err := m.client(name)
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	resp, err := client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{claimRef(claim)}})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources failed: %w", err)
	}
	r, ok := resp.Claims[string(claim.UID)]
	if !ok {
		return nil, fmt.Errorf("NodePrepareResources skipped 1 ResourceClaim")
	}
	if r.Error != "" {
		return nil, fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", claim.Name, r.Error)
	}
	log.WithFields(log.Fields{"driver": name, "claim": claim.Namespace + "/" + claim.Name, "devices": len(r.Devices)}).Info("dra: claim prepared")
	return r.Devices, nil
}

// ContainerCDI lists the CDI devices of the claims (or claim requests) a
// container uses.
func (m *Manager) ContainerCDI(pod *v1.Pod, c *v1.Container) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, rc := range c.Resources.Claims {
		p, ok := m.pods[pod.UID][rc.Name]
		if !ok {
			continue
		}
		for _, d := range p.devices {
			if rc.Request == "" || slicesHasRequest(d.RequestNames, rc.Request) {
				out = append(out, d.CdiDeviceIds...)
			}
		}
	}
	return out
}

// slicesHasRequest matches a request or one of its subrequests
// ("req/sub").
func slicesHasRequest(names []string, request string) bool {
	for _, n := range names {
		if n == request || strings.HasPrefix(n, request+"/") {
			return true
		}
	}
	return false
}

// Unprepare has the drivers unprepare the claims of a pod that is gone,
// unless another pod of the node still uses them (a shared claim). Claims
// a driver did not unprepare stay recorded and are tried again when a
// driver registers.
func (m *Manager) Unprepare(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	claims := m.pods[uid]
	inUse := map[types.UID]bool{}
	for other, ps := range m.pods {
		if other == uid || m.gone[other] {
			continue
		}
		for _, p := range ps {
			inUse[p.claim.UID] = true
		}
	}
	m.mu.Unlock()
	failed := map[string]prepared{}
	for name, p := range claims {
		if !inUse[p.claim.UID] && !m.unprepare(ctx, p.claim) {
			failed[name] = p
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(failed) == 0 {
		m.record(uid, nil)
		return
	}
	m.gone[uid] = true
	m.record(uid, failed)
}

// unprepare asks each driver of the claim to unprepare it; false if one
// could not.
func (m *Manager) unprepare(ctx context.Context, claim *resourceapi.ResourceClaim) bool {
	ok := true
	drivers := map[string]bool{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		drivers[r.Driver] = true
	}
	for d := range drivers {
		l := log.WithFields(log.Fields{"driver": d, "claim": claim.Namespace + "/" + claim.Name})
		client, done, err := m.client(d)
		if err != nil {
			l.WithError(err).Warn("dra: claim not unprepared yet")
			ok = false
			continue
		}
		resp, err := client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{claimRef(claim)}})
		done()
		if err == nil {
			if r := resp.Claims[string(claim.UID)]; r != nil && r.Error != "" {
				err = errors.New(r.Error)
			}
		}
		if err != nil {
			l.WithError(err).Warn("dra: NodeUnprepareResources")
			ok = false
			continue
		}
		l.Info("dra: claim unprepared")
	}
	return ok
}

// retryUnprepare tries again the claims of pods gone whose unprepare
// failed (a driver just registered).
func (m *Manager) retryUnprepare(ctx context.Context) {
	m.mu.Lock()
	var uids []types.UID
	for uid := range m.gone {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.Unprepare(ctx, uid)
	}
}
