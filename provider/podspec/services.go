package podspec

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func sortStrings(s []string) { sort.Strings(s) }

// serviceEnv returns the Docker-links style variables the kubelet injects:
// always for the "kubernetes" service of the default namespace, and for every
// service of the pod's namespace when enableServiceLinks is on.
func (r *Runtime) serviceEnv(pod *v1.Pod) [][2]string {
	if r.cfg.Services == nil {
		return nil
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	all, err := r.cfg.Services.List(labels.Everything())
	if err != nil {
		return nil
	}
	chosen := map[string]*v1.Service{}
	for _, s := range all {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		switch {
		case s.Namespace == pod.Namespace && links:
			chosen[s.Name] = s
		case s.Namespace == "default" && s.Name == "kubernetes":
			if _, ok := chosen[s.Name]; !ok {
				chosen[s.Name] = s
			}
		}
	}
	names := make([]string, 0, len(chosen))
	for n := range chosen {
		names = append(names, n)
	}
	sort.Strings(names)
	var out [][2]string
	for _, n := range names {
		out = append(out, serviceVars(chosen[n])...)
	}
	return out
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

func serviceVars(s *v1.Service) [][2]string {
	name := envName(s.Name)
	ip := s.Spec.ClusterIP
	if len(s.Spec.Ports) == 0 {
		return nil
	}
	first := s.Spec.Ports[0]
	out := [][2]string{
		{name + "_SERVICE_HOST", ip},
		{name + "_SERVICE_PORT", fmt.Sprint(first.Port)},
	}
	for _, sp := range s.Spec.Ports {
		if sp.Name != "" {
			out = append(out, [2]string{name + "_SERVICE_PORT_" + envName(sp.Name), fmt.Sprint(sp.Port)})
		}
	}
	hostPort := ip
	if strings.Contains(ip, ":") {
		hostPort = "[" + ip + "]"
	}
	proto := strings.ToLower(string(first.Protocol))
	out = append(out, [2]string{name + "_PORT", fmt.Sprintf("%s://%s:%d", proto, hostPort, first.Port)})
	for _, sp := range s.Spec.Ports {
		pr := string(sp.Protocol)
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, sp.Port, strings.ToUpper(pr))
		out = append(out,
			[2]string{prefix, fmt.Sprintf("%s://%s:%d", strings.ToLower(pr), hostPort, sp.Port)},
			[2]string{prefix + "_PROTO", strings.ToLower(pr)},
			[2]string{prefix + "_PORT", fmt.Sprint(sp.Port)},
			[2]string{prefix + "_ADDR", ip},
		)
	}
	return out
}
