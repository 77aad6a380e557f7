package staticpod

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// The priorities of the two system classes, as the API server's Priority
// admission resolves them (scheduling.SystemCriticalPriority and above).
var systemPriorities = map[string]int32{
	"system-cluster-critical": 2000000000,
	"system-node-critical":    2000001000,
}

// SetDefaults gives a decoded manifest the defaults the API server's
// scheme gives a pod (k8s.io/kubernetes/pkg/apis/core/v1 defaults), which
// the kubelet's decoder applies to a manifest before hashing it: the rest
// of the node reads a static pod as it reads a pod from the API. A pod of
// a system priority class gets its priority, as the Priority admission gives
// the mirror pod.
func SetDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = v1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = v1.DNSClusterFirst
	}
	if spec.TerminationGracePeriodSeconds == nil {
		g := int64(v1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &g
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = v1.DefaultSchedulerName
	}
	if spec.EnableServiceLinks == nil {
		t := v1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &t
	}
	if p, ok := systemPriorities[spec.PriorityClassName]; ok && spec.Priority == nil {
		spec.Priority = &p
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i], spec.HostNetwork)
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i], spec.HostNetwork)
	}
	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
}

func defaultContainer(c *v1.Container, hostNetwork bool) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	// Limits without requests request the limits.
	for name, q := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = v1.ResourceList{}
			}
			c.Resources.Requests[name] = q.DeepCopy()
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	for _, h := range lifecycleHandlers(c.Lifecycle) {
		if h.HTTPGet != nil {
			defaultHTTPGet(h.HTTPGet)
		}
	}
}

func lifecycleHandlers(l *v1.Lifecycle) []*v1.LifecycleHandler {
	if l == nil {
		return nil
	}
	var out []*v1.LifecycleHandler
	if l.PostStart != nil {
		out = append(out, l.PostStart)
	}
	if l.PreStop != nil {
		out = append(out, l.PreStop)
	}
	return out
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if p.HTTPGet != nil {
		defaultHTTPGet(p.HTTPGet)
	}
	if p.GRPC != nil && p.GRPC.Service == nil {
		s := ""
		p.GRPC.Service = &s
	}
}

func defaultHTTPGet(h *v1.HTTPGetAction) {
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = v1.URISchemeHTTP
	}
}

func defaultVolume(v *v1.Volume) {
	mode := v1.DownwardAPIVolumeSourceDefaultMode
	switch {
	case v.VolumeSource == (v1.VolumeSource{}):
		v.EmptyDir = &v1.EmptyDirVolumeSource{}
	case v.HostPath != nil && v.HostPath.Type == nil:
		t := v1.HostPathUnset
		v.HostPath.Type = &t
	case v.DownwardAPI != nil:
		if v.DownwardAPI.DefaultMode == nil {
			v.DownwardAPI.DefaultMode = &mode
		}
		for i := range v.DownwardAPI.Items {
			if f := v.DownwardAPI.Items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	case v.Projected != nil && v.Projected.DefaultMode == nil:
		pm := v1.ProjectedVolumeSourceDefaultMode
		v.Projected.DefaultMode = &pm
	}
}

// defaultPullPolicy is Always for an image without a tag or tagged
// latest (and not pinned by digest), else IfNotPresent.
func defaultPullPolicy(image string) v1.PullPolicy {
	if strings.Contains(image, "@") {
		return v1.PullIfNotPresent
	}
	name := image
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
