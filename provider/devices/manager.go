// Package devices is the kubelet's device manager: the device plugin
// Registration service, one endpoint per registered resource feeding the
// node's capacity and allocatable, device assignment at pod admission
// (Allocate, GetPreferredAllocation, PreStartContainer) and a checkpoint of
// the assignments that survives a restart of hostlet.
package devices

import (
	"context"
	"fmt"
	"github.com/hostlet/hostlet/crash"
	"path/filepath"
	"sort"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stopGrace is how long a resource whose plugin went away keeps its
// capacity (all devices unhealthy) before it drops to zero: the kubelet's
// endpointStopGracePeriod, time for a plugin to restart.
const stopGrace = 5 * time.Minute

// Config says where the plugins meet hostlet and which pods are alive.
type Config struct {
	// Dir is <root-dir>/device-plugins: kubelet.sock, the plugins' sockets
	// and the checkpoint.
	Dir string
	// ActivePods lists the pods whose devices are kept; ok is false while
	// that is not known yet (the pod cache not synced), and then nothing
	// is freed.
	ActivePods func() (pods []*v1.Pod, ok bool)
}

// state is one resource: its plugin's endpoint (nil until it registers,
// and after it went away) and its devices as last listed.
type state struct {
	ep      *endpoint
	lost    *endpoint // the endpoint that went away, for its grace timer
	devices map[string]*pluginapi.Device
}

func (s *state) healthy() sets.Set[string] {
	out := sets.New[string]()
	for id, d := range s.devices {
		if d.Health == pluginapi.Healthy {
			out.Insert(id)
		}
	}
	return out
}

// Manager is the device manager.
type Manager struct {
	cfg     Config
	ctx     context.Context
	changed func()

	// allocMu serializes allocations, whose RPCs run outside mu.
	allocMu   sync.Mutex
	mu        sync.Mutex
	resources map[string]*state
	assigned  assignments
}

// New restores the checkpoint: the assignments, and the resources that
// were registered, with no devices until their plugins register again.
func New(cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, ctx: context.Background(), changed: func() {}, resources: map[string]*state{}}
	cp, err := readCheckpoint(m.checkpointPath())
	if err != nil {
		// A torn or foreign file must not keep the node down; what it held
		// is lost, as with the kubelet's corrupt checkpoint.
		log.WithError(err).Warn("devices: checkpoint unreadable, starting without assignments")
	}
	m.assigned = cp.Assignments
	for name := range cp.Registered {
		m.resources[name] = &state{devices: map[string]*pluginapi.Device{}}
	}
	return m, nil
}

// Start serves the Registration service; changed is called whenever the
// resources' capacity or allocatable may have changed.
func (m *Manager) Start(ctx context.Context, changed func()) error {
	m.ctx, m.changed = ctx, changed
	return m.serve(ctx)
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.cfg.Dir, checkpointName) }

// saveLocked writes the checkpoint. Called with mu.
func (m *Manager) saveLocked() {
	cp := checkpoint{Assignments: m.assigned, Registered: map[string][]string{}}
	for name, s := range m.resources {
		cp.Registered[name] = sets.List(sets.KeySet(s.devices))
	}
	if err := writeCheckpoint(m.checkpointPath(), cp); err != nil {
		log.WithError(err).Error("devices: writing the checkpoint")
	}
}

// connect makes e the resource's endpoint (a re-registering plugin
// replaces its old one) and streams its devices.
func (m *Manager) connect(e *endpoint) {
	ctx, cancel := context.WithCancel(m.ctx)
	e.cancel = cancel
	m.mu.Lock()
	s := m.resources[e.resource]
	if s == nil {
		s = &state{devices: map[string]*pluginapi.Device{}}
		m.resources[e.resource] = s
	}
	old := s.ep
	s.ep, s.lost = e, nil
	m.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go func() {
		// A plugin's answers must not take the node down: a panic ends
		// this endpoint as a disconnect would.
		defer m.disconnected(e)
		defer crash.Recover(log.WithField("resource", e.resource), nil)
		e.run(ctx, func(devs []*pluginapi.Device) { m.update(e, devs) })
	}()
}

// update takes a ListAndWatch answer: every device counts for capacity,
// the healthy ones for allocatable; the node status is updated at once.
func (m *Manager) update(e *endpoint, devs []*pluginapi.Device) {
	m.mu.Lock()
	s := m.resources[e.resource]
	if s == nil || s.ep != e {
		m.mu.Unlock()
		return
	}
	s.devices = map[string]*pluginapi.Device{}
	healthy := 0
	for _, d := range devs {
		s.devices[d.ID] = d
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	m.saveLocked()
	m.mu.Unlock()
	log.WithFields(log.Fields{"resource": e.resource, "devices": len(devs), "healthy": healthy}).Info("devices: plugin listed its devices")
	m.changed()
}

// disconnected handles a plugin that went away: its devices turn
// unhealthy at once and, unless it registers again within stopGrace, the
// resource's capacity drops to zero.
func (m *Manager) disconnected(e *endpoint) {
	e.stop()
	m.mu.Lock()
	s := m.resources[e.resource]
	if s == nil || s.ep != e {
		m.mu.Unlock()
		return
	}
	s.ep, s.lost = nil, e
	for id, d := range s.devices {
		u := proto.Clone(d).(*pluginapi.Device)
		u.Health = pluginapi.Unhealthy
		s.devices[id] = u
	}
	m.mu.Unlock()
	log.WithField("resource", e.resource).Info("devices: plugin went away; its devices are unhealthy until it registers again")
	m.changed()
	time.AfterFunc(stopGrace, func() {
		m.mu.Lock()
		expired := s.ep == nil && s.lost == e
		if expired {
			s.devices = map[string]*pluginapi.Device{}
			s.lost = nil
			m.saveLocked()
		}
		m.mu.Unlock()
		if expired {
			m.changed()
		}
	})
}

// Resources is what the node reports and admits against: capacity counts
// every device of a resource, allocatable the healthy ones; assigned, the
// devices pods hold (at least that much counts as allocatable during
// admission, as the kubelet's sanitizeNodeAllocatable does, while a plugin
// has not registered again after a restart).
func (m *Manager) Resources() (capacity, allocatable, assigned v1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable, assigned = v1.ResourceList{}, v1.ResourceList{}, v1.ResourceList{}
	for name, s := range m.resources {
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(len(s.devices)), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(s.healthy().Len()), resource.DecimalSI)
	}
	for name, n := range m.assigned.count() {
		assigned[v1.ResourceName(name)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	return capacity, allocatable, assigned
}

func (m *Manager) known(name v1.ResourceName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.resources[string(name)]
	return ok
}

// deviceLimits lists a container's device plugin resources and counts, in
// name order (extended resources cannot be overcommitted: limits say it).
func (m *Manager) deviceLimits(c *v1.Container) []v1.ResourceName {
	var out []v1.ResourceName
	for name, q := range c.Resources.Limits {
		if !q.IsZero() && m.known(name) {
			out = append(out, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Allocate assigns devices to each container of a newly admitted pod and
// has the plugins allocate them, in the kubelet's order: init containers
// first, whose devices the later containers reuse. Containers that hold
// theirs already (the pod was admitted before a restart of hostlet) keep
// them. The errors are the kubelet's device manager's.
func (m *Manager) Allocate(pod *v1.Pod) error {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	m.freeInactive(pod.UID)
	reuse := map[v1.ResourceName]sets.Set[string]{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		ids, err := m.allocateContainer(pod, c, reuse)
		if err != nil {
			return err
		}
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
		for name, got := range ids {
			if reuse[name] == nil {
				reuse[name] = sets.New[string]()
			}
			if sidecar {
				reuse[name].Delete(got...)
			} else {
				reuse[name].Insert(got...)
			}
		}
	}
	for i := range pod.Spec.Containers {
		ids, err := m.allocateContainer(pod, &pod.Spec.Containers[i], reuse)
		if err != nil {
			return err
		}
		for name, got := range ids {
			if reuse[name] != nil {
				reuse[name].Delete(got...)
			}
		}
	}
	return nil
}

// allocateContainer gives one container its devices and returns them by
// resource. Called with allocMu.
func (m *Manager) allocateContainer(pod *v1.Pod, c *v1.Container, reuse map[v1.ResourceName]sets.Set[string]) (map[v1.ResourceName][]string, error) {
	uid := string(pod.UID)
	out := map[v1.ResourceName][]string{}
	for _, name := range m.deviceLimits(c) {
		q := c.Resources.Limits[name]
		need := int(q.Value())
		res := string(name)
		m.mu.Lock()
		if x, ok := m.assigned.get(uid, c.Name, res); ok {
			m.mu.Unlock()
			if len(x.DeviceIDs) != need {
				return nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", uid, c.Name, res, len(x.DeviceIDs), need)
			}
			out[name] = x.DeviceIDs
			continue
		}
		s := m.resources[res]
		ep := s.ep
		healthy := s.healthy()
		free := healthy.Difference(m.assigned.inUse(res))
		m.mu.Unlock()
		if healthy.Len() == 0 {
			return nil, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", res)
		}
		if ep == nil {
			return nil, fmt.Errorf("cannot allocate unregistered device %s", res)
		}
		reusable := sets.List(reuse[name])
		if len(reusable) > need {
			reusable = reusable[:need]
		}
		if remaining := need - len(reusable); free.Len() < remaining {
			return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, remaining, free.Len())
		}
		var preferred []string
		if need-len(reusable) < free.Len() {
			var err error
			preferred, err = ep.preferred(m.ctx, sets.List(free.Union(sets.New(reusable...))), reusable, need)
			if err != nil {
				return nil, err
			}
		}
		ids, ok := pick(need, reusable, free, preferred)
		if !ok {
			return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", need, len(ids))
		}
		resp, err := ep.allocate(m.ctx, ids)
		if err != nil {
			return nil, err
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.assigned.set(uid, c.Name, res, assignment{DeviceIDs: ids, Response: b})
		m.saveLocked()
		m.mu.Unlock()
		log.WithFields(log.Fields{"pod": pod.Namespace + "/" + pod.Name, "uid": uid, "container": c.Name, "resource": res, "devices": ids}).
			Info("devices: allocated")
		out[name] = ids
	}
	return out, nil
}

// freeInactive drops the assignments of pods no longer active (finished or
// gone), as the kubelet's UpdateAllocatedDevices does before allocating.
func (m *Manager) freeInactive(admitting types.UID) {
	if m.cfg.ActivePods == nil {
		return
	}
	pods, ok := m.cfg.ActivePods()
	if !ok {
		return
	}
	keep := sets.New(string(admitting))
	for _, p := range pods {
		keep.Insert(string(p.UID))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.assigned.retain(keep) {
		m.saveLocked()
	}
}

// Release frees a pod's devices: admission rejected it after they were
// assigned.
func (m *Manager) Release(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.assigned[string(uid)]; ok {
		delete(m.assigned, string(uid))
		m.saveLocked()
	}
}

// ContainerAllocations returns the plugins' Allocate answers for a
// container about to be created, after PreStartContainer where a plugin
// asks for it. A container without its assignment (lost with a torn
// checkpoint) is allocated again.
func (m *Manager) ContainerAllocations(ctx context.Context, pod *v1.Pod, container string) ([]*pluginapi.ContainerAllocateResponse, error) {
	c := findContainer(pod, container)
	if c == nil {
		return nil, nil
	}
	var out []*pluginapi.ContainerAllocateResponse
	for _, name := range m.deviceLimits(c) {
		res := string(name)
		m.mu.Lock()
		x, ok := m.assigned.get(string(pod.UID), container, res)
		m.mu.Unlock()
		if !ok {
			if err := m.Allocate(pod); err != nil {
				return nil, err
			}
			m.mu.Lock()
			x, ok = m.assigned.get(string(pod.UID), container, res)
			m.mu.Unlock()
			if !ok {
				return nil, fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", pod.UID, container, res)
			}
		}
		m.mu.Lock()
		ep := m.resources[res].ep
		m.mu.Unlock()
		// A plugin not back yet after a restart: the kubelet's restored
		// endpoints have no options, so no PreStartContainer either.
		if ep != nil {
			if err := ep.preStart(ctx, x.DeviceIDs); err != nil {
				return nil, err
			}
		}
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(x.Response, resp); err != nil {
			return nil, err
		}
		out = append(out, resp)
	}
	return out, nil
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// Assigned lists a container's devices by resource, for the pod resources
// API.
func (m *Manager) Assigned(podUID types.UID, container string) map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for res, x := range m.assigned[string(podUID)][container] {
		out[res] = append([]string(nil), x.DeviceIDs...)
	}
	return out
}

// Allocatable lists every healthy device by resource, for the pod
// resources API.
func (m *Manager) Allocatable() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for name, s := range m.resources {
		if h := s.healthy(); h.Len() > 0 {
			out[name] = sets.List(h)
		}
	}
	return out
}
