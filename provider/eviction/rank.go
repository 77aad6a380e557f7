package eviction

import (
	"sort"
	"strings"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// usage is what the eviction manager knows of a pod's memory: the working
// set of each of its live containers, by name, in status order.
type usage struct {
	containers []containerUsage
}

type containerUsage struct {
	name       string
	workingSet int64
}

func (u usage) total() int64 {
	var sum int64
	for _, c := range u.containers {
		sum += c.workingSet
	}
	return sum
}

// podUsage pairs a pod's container statuses with the runtime's samples (by
// container ID); found is false when none of its containers has a sample,
// which the kubelet's stats would not list either.
func podUsage(pod *v1.Pod, samples map[string]runtime.ContainerStats) (usage, bool) {
	var u usage
	for _, st := range statuses(pod) {
		id := strings.TrimPrefix(st.ContainerID, "containerd://")
		if s, ok := samples[id]; ok && id != "" {
			u.containers = append(u.containers, containerUsage{name: st.Name, workingSet: int64(s.WorkingSet)})
		}
	}
	return u, len(u.containers) > 0
}

// statuses are the statuses of all the pod's containers, init and
// ephemeral ones included.
func statuses(pod *v1.Pod) []v1.ContainerStatus {
	out := append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	return append(out, pod.Status.EphemeralContainerStatuses...)
}

// memoryRequest is the pod's effective memory request, as the scheduler
// and kubelet compute it.
func memoryRequest(pod *v1.Pod) int64 {
	q := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceMemory]
	return q.Value()
}

// rankMemory orders pods for eviction under memory pressure as the kubelet
// does: pods without stats first, then those using more than they
// requested, then lower priority, then larger use above the request.
func rankMemory(pods []*v1.Pod, stats map[*v1.Pod]usage) {
	keys := make(map[*v1.Pod]rankKey, len(pods))
	for _, p := range pods {
		u, ok := stats[p]
		above := u.total() - memoryRequest(p)
		keys[p] = rankKey{noStats: !ok, exceeds: ok && above > 0, above: above}
	}
	rank(pods, keys)
}

// rankKey is where a pod stands in the kubelet's memory and disk orders.
type rankKey struct {
	noStats, exceeds bool
	// above is the use above the request.
	above int64
}

// rank sorts by the kubelet's comparisons in turn: no stats, use above
// the request, priority, the amount above the request.
func rank(pods []*v1.Pod, keys map[*v1.Pod]rankKey) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := keys[pods[i]], keys[pods[j]]
		if a.noStats != b.noStats {
			return a.noStats
		}
		if a.exceeds != b.exceeds {
			return a.exceeds
		}
		if pa, pb := corev1helpers.PodPriority(pods[i]), corev1helpers.PodPriority(pods[j]); pa != pb {
			return pa < pb
		}
		if a.noStats {
			return false // without stats, priority is all that tells them apart
		}
		return a.above > b.above
	})
}

// rankPriority orders pods by priority only: the kubelet's PID ranking
// without per-pod process counts, which hostlet does not sample.
func rankPriority(pods []*v1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		return corev1helpers.PodPriority(pods[i]) < corev1helpers.PodPriority(pods[j])
	})
}

// offenders are the containers using more memory than they request, with
// their use, as the kubelet names them in the eviction message; ephemeral
// containers, which cannot request anything, are left out.
func offenders(pod *v1.Pod, u usage) (names, used []string, text string) {
	requests := containerRequests(pod, v1.ResourceMemory)
	var b strings.Builder
	for _, c := range u.containers {
		req, ok := requests[c.name]
		if !ok {
			continue
		}
		q := resource.NewQuantity(c.workingSet, resource.BinarySI)
		if q.Cmp(req) > 0 {
			b.WriteString(containerMessage(c.name, q, req, v1.ResourceMemory))
			names = append(names, c.name)
			used = append(used, q.String())
		}
	}
	return names, used, b.String()
}

// containerRequests are the regular and init containers' requests of res
// by name (zero when not requested).
func containerRequests(pod *v1.Pod, res v1.ResourceName) map[string]resource.Quantity {
	out := map[string]resource.Quantity{}
	for _, c := range append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
		out[c.Name] = c.Resources.Requests[res]
	}
	return out
}
