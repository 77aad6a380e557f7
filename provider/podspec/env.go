package podspec

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hostlet/hostlet/expansion"
	"github.com/hostlet/hostlet/lifecycle"
	"github.com/hostlet/hostlet/provider/objects"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func configError(err error) error {
	return &lifecycle.Failure{Reason: "CreateContainerConfigError", Message: err.Error()}
}

// containerEnv resolves a container's environment as the kubelet does:
// service variables, then envFrom, then env with $(VAR) expansion.
func (r *Runtime) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string, objs *objects.Refs) ([]string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	serviceEnv := r.serviceEnv(pod)
	for _, kv := range serviceEnv {
		set(kv[0], kv[1])
	}
	// Every key becomes a variable, prefixed: since relaxed environment
	// variable validation went GA the kubelet no longer filters names.
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, ok, err := objects.Optional(ctx, objs.ConfigMap, from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
			if err != nil {
				return nil, configError(err)
			}
			if !ok {
				continue
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, ok, err := objects.Optional(ctx, objs.Secret, from.SecretRef.Name, from.SecretRef.Optional)
			if err != nil {
				return nil, configError(err)
			}
			if !ok {
				continue
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expansion.Expand(e.Value, lookup))
			continue
		}
		v, ok, err := r.envValueFrom(ctx, pod, c, e.ValueFrom, podIPs, objs)
		if err != nil {
			return nil, configError(err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

func (r *Runtime) envValueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, from *v1.EnvVarSource, podIPs []string, objs *objects.Refs) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := fieldValue(pod, from.FieldRef.FieldPath, podIPs, r.hostIPs())
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := r.resourceValue(pod, c, from.ResourceFieldRef)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, ok, err := objects.Optional(ctx, objs.ConfigMap, ref.Name, ref.Optional)
		if err != nil || !ok {
			return "", false, err
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if objects.IsOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, ok, err := objects.Optional(ctx, objs.Secret, ref.Name, ref.Optional)
		if err != nil || !ok {
			return "", false, err
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if objects.IsOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	case from.FileKeyRef != nil:
		if !r.gate("EnvFiles") {
			// The kubelet with the gate off reads nothing: the variable
			// is there, empty.
			return "", true, nil
		}
		return r.fileKeyRefValue(pod, from.FileKeyRef)
	}
	return "", false, nil
}

// fieldValue resolves a downward API field path.
func fieldValue(pod *v1.Pod, path string, podIPs, hostIPs []string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return first(hostIPs), nil
	case "status.hostIPs":
		return strings.Join(hostIPs, ","), nil
	case "status.podIP":
		if pod.Spec.HostNetwork {
			return first(hostIPs), nil
		}
		return first(podIPs), nil
	case "status.podIPs":
		if pod.Spec.HostNetwork {
			return strings.Join(hostIPs, ","), nil
		}
		return strings.Join(podIPs, ","), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %s", path)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// subscript parses "metadata.labels['key']".
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap renders labels/annotations as the downward API does: sorted
// key="escaped value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// resourceValue resolves a resourceFieldRef; a limit that is not set is the
// node's allocatable, as with the kubelet.
func (r *Runtime) resourceValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" {
		c = findContainer(pod, ref.ContainerName)
		if c == nil {
			return "", fmt.Errorf("container %s not found", ref.ContainerName)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported container resource: %v", ref.Resource)
	}
	var q resource.Quantity
	switch kind {
	case "limits":
		var found bool
		if q, found = c.Resources.Limits[v1.ResourceName(name)]; !found {
			q = r.allocatable()[v1.ResourceName(name)]
		}
	case "requests":
		// An unset request reads as zero, as with the kubelet.
		q = c.Resources.Requests[v1.ResourceName(name)]
	default:
		return "", fmt.Errorf("unsupported container resource: %v", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == "cpu" {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	if ec := ephemeralContainer(pod, name); ec != nil {
		return (*v1.Container)(&ec.EphemeralContainerCommon)
	}
	return nil
}
