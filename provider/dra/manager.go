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
	// RegistryDir is <root-dir>/plugins_registry.
	RegistryDir string
	// Client reads ResourceClaims (the Node authorizer lets a node read
	// those of its pods).
	Client kubernetes.Interface
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
}

func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, drivers: map[string]driver{}, pods: map[types.UID]map[string]prepared{}}
}

// Start watches the registry dir.
func (m *Manager) Start(ctx context.Context) error { return m.watch(ctx) }

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
	m.pods[pod.UID] = out
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
// unless another pod of the node still uses them (a shared claim).
func (m *Manager) Unprepare(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	claims := m.pods[uid]
	delete(m.pods, uid)
	inUse := map[types.UID]bool{}
	for _, other := range m.pods {
		for _, p := range other {
			inUse[p.claim.UID] = true
		}
	}
	m.mu.Unlock()
	for _, p := range claims {
		if inUse[p.claim.UID] {
			continue
		}
		drivers := map[string]bool{}
		for _, r := range p.claim.Status.Allocation.Devices.Results {
			drivers[r.Driver] = true
		}
		for d := range drivers {
			client, done, err := m.client(d)
			if err != nil {
				log.WithError(err).Warn("dra: unprepare")
				continue
			}
			l := log.WithFields(log.Fields{"driver": d, "claim": p.claim.Namespace + "/" + p.claim.Name})
			resp, err := client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{claimRef(p.claim)}})
			if err == nil {
				if r := resp.Claims[string(p.claim.UID)]; r != nil && r.Error != "" {
					err = errors.New(r.Error)
				}
			}
			if err != nil {
				l.WithError(err).Warn("dra: NodeUnprepareResources")
			} else {
				l.Info("dra: claim unprepared")
			}
			done()
		}
	}
}
