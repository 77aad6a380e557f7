package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hostlet/hostlet/probes"
	v1 "k8s.io/api/core/v1"
)

// probeResult is a probe verdict for one container instance.
type probeResult struct {
	name, id string
	kind     probes.Kind
	ok       bool
}

// target is the probe/hook target of a container instance.
func (p *Pod) target(c *v1.Container, id string) probes.Target {
	ip := ""
	if len(p.podIPs) > 0 {
		ip = p.podIPs[0]
	}
	return probes.Target{
		PodIP:     ip,
		Container: c,
		Exec: func(ctx context.Context, cmd []string, timeout time.Duration) ([]byte, int, error) {
			return p.cfg.Runtime.Exec(ctx, id, cmd, timeout)
		},
	}
}

// startProbes starts the probe workers of a container instance that just
// started running, or that outlived the last hostlet (adopted); they stop
// with the instance.
func (p *Pod) startProbes(c *v1.Container, rec *container, adopted bool) {
	rec.started = c.StartupProbe == nil
	rec.ready = false
	if adopted {
		p.keepStateFromAPI(c, rec)
	}
	if rec.probeCancel != nil {
		rec.probeCancel()
		rec.probeCancel = nil
	}
	if c.LivenessProbe == nil && c.ReadinessProbe == nil && c.StartupProbe == nil {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	rec.probeCancel = cancel
	// Probe goroutines use a snapshot: the pod object and IPs belong to the
	// worker goroutine.
	id, name, pod, target := rec.cur.ID, c.Name, p.pod, p.target(c, rec.cur.ID)
	event := func(eventType, reason, msg string) {
		if p.cfg.Recorder != nil {
			p.cfg.Recorder.Event(pod, name, eventType, reason, msg)
		}
	}
	started := func() bool {
		p.shared.mu.Lock()
		defer p.shared.mu.Unlock()
		return p.shared.startedIDs[id]
	}
	if rec.started {
		p.shared.mu.Lock()
		p.shared.startedIDs[id] = true
		p.shared.mu.Unlock()
	}
	// Closed when the startup probe succeeds: the others probe at once.
	startedNow := make(chan struct{})
	for kind, spec := range map[probes.Kind]*v1.Probe{probes.Liveness: c.LivenessProbe, probes.Readiness: c.ReadinessProbe, probes.Startup: c.StartupProbe} {
		if spec == nil {
			continue
		}
		handler := spec.ProbeHandler
		p.cfg.Prober.Start(ctx, probes.WorkerConfig{
			Clock:     p.clock,
			Kind:      kind,
			Spec:      spec,
			StartedAt: rec.cur.StartedAt,
			Run: func(ctx context.Context, timeout time.Duration) (probes.Result, string) {
				return p.cfg.Prober.Probe(ctx, &handler, target, timeout)
			},
			Started:  started,
			Kick:     startedNow,
			Log:      PodLogger(pod).WithField("container", name),
			Metric:   probes.MetricLabels{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), Container: name},
			Panicked: p.probePanicked(PodLogger(pod).WithField("container", name), event),
			Set: func(kind probes.Kind, ok bool) {
				p.shared.mu.Lock()
				if kind == probes.Startup && ok {
					p.shared.startedIDs[id] = true
					close(startedNow)
				}
				p.shared.probeResults = append(p.shared.probeResults, probeResult{name: name, id: id, kind: kind, ok: ok})
				p.shared.mu.Unlock()
				p.poke()
			},
			Event: func(kind probes.Kind, r probes.Result, out string) {
				if r == probes.Warning {
					event(v1.EventTypeWarning, "ProbeWarning", fmt.Sprintf("%s probe warning: %s", kind, out))
					return
				}
				event(v1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %s", kind, out))
			},
		})
	}
}

// keepStateFromAPI gives an adopted container what the API says of it
// until its probes say otherwise, as the kubelet does after a restart
// (ChangeContainerStatusOnKubeletRestart off, its default): started if it
// was, and ready if the pod was Ready. A restart of hostlet then neither
// takes pods out of their Services nor runs startup probes again.
func (p *Pod) keepStateFromAPI(c *v1.Container, rec *container) {
	st := &p.pod.Status
	cs, ok := findStatus(st.ContainerStatuses, c.Name)
	if !ok {
		cs, ok = findStatus(st.InitContainerStatuses, c.Name)
	}
	// The same instance only: one started since is new.
	if !ok || cs.ContainerID != containerID(rec.cur.ID) || cs.State.Running == nil {
		return
	}
	rec.started = rec.started || (cs.Started != nil && *cs.Started)
	podReady := slices.ContainsFunc(st.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.PodReady && c.Status == v1.ConditionTrue
	})
	rec.ready = rec.started && cs.Ready && podReady
}

func (p *Pod) stopProbes() {
	for _, rec := range p.containers {
		if rec.probeCancel != nil {
			rec.probeCancel()
			rec.probeCancel = nil
		}
	}
}

// applyProbe records a verdict; a failed liveness or startup probe marks
// the container to be killed by the next sync.
func (p *Pod) applyProbe(r probeResult) {
	rec := p.containers[r.name]
	if rec == nil || rec.cur.ID != r.id || !rec.cur.Running {
		return
	}
	switch {
	case r.kind == probes.Readiness:
		rec.ready = r.ok
	case r.kind == probes.Startup && r.ok:
		rec.started = true
	case r.kind == probes.Startup:
		rec.killFor = probes.Startup
	case r.kind == probes.Liveness && !r.ok:
		rec.killFor = probes.Liveness
	}
}

// probeKills kills containers whose liveness or startup probe failed; the
// restart policy then decides what follows.
func (p *Pod) probeKills(ctx context.Context) {
	for _, c := range p.allContainers() {
		rec := p.containers[c.Name]
		if rec == nil || rec.killFor == "" || !rec.cur.Running {
			continue
		}
		kind := rec.killFor
		rec.killFor = ""
		var probe *v1.Probe
		what := "liveness"
		if kind == probes.Startup {
			probe, what = c.StartupProbe, "startup"
		} else {
			probe = c.LivenessProbe
		}
		grace := p.specGrace()
		if probe != nil && probe.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*probe.TerminationGracePeriodSeconds) * time.Second
		}
		msg := fmt.Sprintf("Container %s failed %s probe", c.Name, what)
		if ShouldRestart(c, &p.pod.Spec, 1) {
			msg += ", will be restarted"
		}
		// The failed probe's worker has stopped (on hold, as the kubelet's);
		// the readiness probe goes on through the preStop hook until the
		// container exits, as the kubelet's does.
		p.kill(ctx, c, rec, p.clock.Now().Add(grace), msg, nil)
		rec.probeKilled = true
		// A process that exits 0 on SIGTERM is restarted all the same.
		rec.restartKilled = ShouldRestart(c, &p.pod.Spec, 1)
	}
}

// definitionKills kills the running containers whose definition changed
// since they started (the image: the one container field a pod update may
// change and the kubelet's container hash covers), main containers and
// sidecars, as the kubelet's computePodActions does; they start again with
// the new definition whatever the restart policy, with no back-off (the
// kubelet's back-off is keyed by the container's hash).
func (p *Pod) definitionKills(ctx context.Context) {
	spec := &p.pod.Spec
	var changed []*v1.Container
	for i := range spec.InitContainers {
		if c := &spec.InitContainers[i]; IsSidecar(c) {
			changed = append(changed, c)
		}
	}
	for i := range spec.Containers {
		changed = append(changed, &spec.Containers[i])
	}
	for _, c := range changed {
		rec := p.containers[c.Name]
		// An instance whose image is unknown (a stand-in record) is kept.
		if rec == nil || !rec.cur.Running || rec.cur.Image == "" || rec.cur.Image == c.Image {
			continue
		}
		if rec.probeCancel != nil {
			rec.probeCancel()
			rec.probeCancel = nil
		}
		p.kill(ctx, c, rec, p.clock.Now().Add(p.specGrace()), fmt.Sprintf("Container %s definition changed, will be restarted", c.Name), nil)
		rec.restartKilled, rec.killFor, rec.probeKilled = true, "", false
		rec.bo, rec.retryAt, rec.retryDelay = backoffState{}, time.Time{}, 0
	}
}

// postStart runs the container's postStart hook; on failure the container
// is killed, as the kubelet does, and the restart policy applies.
func (p *Pod) postStart(ctx context.Context, c *v1.Container, rec *container) bool {
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		return true
	}
	_, err := guardHook(p.pod, func() (string, error) {
		return p.cfg.Prober.Hook(ctx, c.Lifecycle.PostStart, p.target(c, rec.cur.ID), p.pod)
	})
	if err == nil {
		return true
	}
	if ctx.Err() != nil {
		// Interrupted by the pod's deletion, which stops the container.
		return false
	}
	p.event(c.Name, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
	p.kill(ctx, c, rec, p.clock.Now().Add(p.specGrace()), "FailedPostStartHook", nil)
	return false
}

// allContainers lists init and main containers of the spec.
func (p *Pod) allContainers() []*v1.Container {
	spec := &p.pod.Spec
	out := make([]*v1.Container, 0, len(spec.InitContainers)+len(spec.Containers))
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}
