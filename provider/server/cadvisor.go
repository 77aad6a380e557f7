package server

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"time"

	"github.com/hostlet/hostlet/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// /metrics/cadvisor is what the kubelet serves from its built-in cAdvisor
// (pkg/kubelet/server/server.go): cAdvisor's PrometheusCollector with the
// kubelet's default metric set and its containerPrometheusLabelsFunc, and
// cAdvisor's machine collector. The series are cAdvisor's (names, help,
// types, units, labels, sample timestamps); the figures are read from the
// same cgroup files with the same library (runtime.CgroupStats).
//
// Which cgroups, as the kubelet's cAdvisor (watching "/" and the node
// allocatable root) has them on a containerd node:
//   - the root "/", kubepods and its QoS cgroups: label id only;
//   - each pod's cgroup: id, pod, namespace (container, image and name
//     empty), as containerPrometheusLabelsFunc labels a pod cgroup;
//   - each container's: id, name (the container ID, cAdvisor's first
//     alias), image, container, pod, namespace.
//
// What differs, because hostlet runs no pause container: cAdvisor reports
// a pod's network on its pause container (a series with container="",
// the pause image and the sandbox ID as name); hostlet pins the pod's
// network namespace without a process, so the network series are on the
// pod cgroup's series (same pod and namespace labels, container="" as
// the pause container's, image and name empty). There is no
// container="POD" series: the kubelet has none on containerd either
// (CRI's sandbox container has no container name label; cri-o's has).
//
// No housekeeping loop: cAdvisor samples every cgroup every 10-15 s to
// keep a history for its own API, and the collector the kubelet registers
// asks it only for the latest sample (Count: 1). Reading the cgroups when
// Prometheus asks gives the same series, fresher, and costs nothing
// between scrapes; each sample carries the time it was read, as cAdvisor's
// carry the time of their housekeeping.

// Cgroups is what /metrics/cadvisor reads of the node's cgroups
// (runtime.Runtime).
type Cgroups interface {
	// NodeCgroups are the root and the pods' parent cgroups, by name.
	NodeCgroups() []string
	// PodCgroupNames names a pod's cgroup ("" for none) and its
	// containers', by container ID.
	PodCgroupNames(uid string, ids []string) (string, map[string]string, error)
	CgroupStats(name string) (runtime.CgroupStats, error)
	// ImageFsDir is where containers' writable layers are.
	ImageFsDir(ctx context.Context) (string, error)
}

// cadvisorLabels are the labels of every container series, in the
// kubelet's names.
var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

// cgroupSeries is one cgroup as a set of series: its labels and one
// reading of it, with the pod's network (on pod cgroups) and filesystems
// where known.
type cgroupSeries struct {
	container, id, image, name, namespace, pod string

	stats runtime.CgroupStats
	// network are the interfaces of the pod's namespace (pod cgroups) or
	// the host's (the root).
	network []runtime.InterfaceStats
	// fs are the filesystems the cgroup uses: a container's writable
	// layer on the image filesystem, the root's the host's.
	fs []fsStat
}

func (s *cgroupSeries) labels() []string {
	return []string{s.container, s.id, s.image, s.name, s.namespace, s.pod}
}

// metricValue is one sample of a family for a cgroup: its value and the
// values of the family's own labels.
type metricValue struct {
	value  float64
	labels []string
}

// cadvisorMetric is a family of cAdvisor's container series: its name,
// help, type and own labels as cAdvisor declares them; has (if set) says
// whether a cgroup has it at all, values are its samples.
type cadvisorMetric struct {
	name, help string
	kind       prometheus.ValueType
	extra      []string
	has        func(*cgroupSeries) bool
	values     func(*cgroupSeries) []metricValue

	desc *prometheus.Desc
}

// one is a single sample without labels of its own.
func one(v float64) []metricValue { return []metricValue{{value: v}} }

// cadvisorFamilies are every family of sampled series, each file's
// concept in turn; spec series (no timestamps) are in cadvisor_spec.go.
var cadvisorFamilies = func() []*cadvisorMetric {
	var out []*cadvisorMetric
	for _, set := range [][]*cadvisorMetric{cpuMetrics, memoryMetrics, fsMetrics, diskIOMetrics,
		networkMetrics, processMetrics, oomMetrics, pressureMetrics} {
		for _, m := range set {
			m.desc = prometheus.NewDesc(m.name, m.help, append(append([]string{}, cadvisorLabels...), m.extra...), nil)
			out = append(out, m)
		}
	}
	return out
}()

var containerScrapeErrorDesc = prometheus.NewDesc("container_scrape_error",
	"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)

// cadvisorCollector answers /metrics/cadvisor's container series.
type cadvisorCollector struct {
	s     *server
	clock clock.PassiveClock
	// imageFs is containerd's snapshotter root, asked until it answers.
	imageFs imageFsDir
	// netDev is the host's /proc/net/dev, the root cgroup's interfaces.
	netDev string
}

func (c *cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- containerScrapeErrorDesc
	for _, m := range cadvisorFamilies {
		ch <- m.desc
	}
	for _, d := range specDescs {
		ch <- d
	}
}

func (c *cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	series, err := c.series(ctx)
	failed := 0.0
	if err != nil {
		log.WithError(err).Warn("cadvisor metrics: no pods")
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(containerScrapeErrorDesc, prometheus.GaugeValue, failed)
	now := c.clock.Now()
	for _, s := range series {
		collectSpec(ch, s, now)
		for _, m := range cadvisorFamilies {
			if m.has != nil && !m.has(s) {
				continue
			}
			for _, v := range m.values(s) {
				ch <- prometheus.NewMetricWithTimestamp(s.stats.Time,
					prometheus.MustNewConstMetric(m.desc, m.kind, v.value, append(s.labels(), v.labels...)...))
			}
		}
	}
}

// series reads every cgroup the kubelet's cAdvisor would report. A cgroup
// that cannot be read (gone since its pod was listed) is left out.
func (c *cadvisorCollector) series(ctx context.Context) ([]*cgroupSeries, error) {
	cg := c.s.cfg.Cgroups
	var out []*cgroupSeries
	read := func(s *cgroupSeries) {
		st, err := cg.CgroupStats(s.id)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.WithError(err).WithField("cgroup", s.id).Debug("cadvisor metrics: unreadable cgroup")
			}
			return
		}
		s.stats = st
		out = append(out, s)
	}
	imageFs := c.imageFs.get(ctx, cg)
	for _, name := range cg.NodeCgroups() {
		s := &cgroupSeries{id: name}
		if name == "/" {
			s.network, _ = runtime.ReadNetDev(c.netDev)
			s.fs = filesystems("/", imageFs)
		}
		read(s)
	}
	pods, err := c.s.cfg.Pods.GetPods(ctx)
	if err != nil {
		return out, err
	}
	var imageFsStat []fsStat
	if imageFs != "" {
		imageFsStat = filesystems(imageFs)
	}
	for _, pod := range pods {
		c.podSeries(ctx, pod, imageFsStat, read)
	}
	return out, nil
}

// podSeries reads a pod's cgroup and its containers'.
func (c *cadvisorCollector) podSeries(ctx context.Context, pod *v1.Pod, imageFs []fsStat, read func(*cgroupSeries)) {
	statuses := allStatuses(pod)
	var ids []string
	for i := range statuses {
		if id := containerIDOf(&statuses[i]); id != "" {
			ids = append(ids, id)
		}
	}
	podCgroup, names, err := c.s.cfg.Cgroups.PodCgroupNames(string(pod.UID), ids)
	if err != nil {
		return // no sandbox (not started, or torn down): nothing to read
	}
	if podCgroup != "" {
		s := &cgroupSeries{id: podCgroup, pod: pod.Name, namespace: pod.Namespace}
		if ifaces, err := c.s.cfg.Stats.PodNetworkStats(string(pod.UID)); err == nil {
			s.network = ifaces
		}
		read(s)
	}
	for i := range statuses {
		st := &statuses[i]
		id := containerIDOf(st)
		if names[id] == "" {
			continue
		}
		s := &cgroupSeries{id: names[id], name: id, image: st.Image, container: st.Name, pod: pod.Name, namespace: pod.Namespace}
		if len(imageFs) == 1 {
			if u, err := c.s.cfg.Usage.RootfsUsage(ctx, id); err == nil {
				fs := imageFs[0]
				fs.usage = u.Bytes
				s.fs = []fsStat{fs}
			}
		}
		read(s)
	}
}

// cadvisorHandler is /metrics/cadvisor: its own registry, as the
// kubelet's, of the container and the machine collectors; a failing one
// leaves the other's series served.
func (s *server) cadvisorHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&cadvisorCollector{s: s, clock: clock.RealClock{}, netDev: "/proc/net/dev"}, &machineCollector{root: "/", clock: clock.RealClock{}})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
