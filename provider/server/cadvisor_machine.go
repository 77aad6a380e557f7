package server

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// The machine series of cAdvisor's PrometheusMachineCollector that a host
// has without NUMA or DIMM inventory: CPUs and memory, labelled with the
// machine's identity, each sample stamped with the time it was read.
var (
	machineLabels     = []string{"machine_id", "system_uuid", "boot_id"}
	machineErrorDesc  = prometheus.NewDesc("machine_scrape_error", "1 if there was an error while getting machine metrics, 0 otherwise.", nil, nil)
	machineCoresDesc  = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", machineLabels, nil)
	machinePhysDesc   = prometheus.NewDesc("machine_cpu_physical_cores", "Number of physical CPU cores.", machineLabels, nil)
	machineSocketDesc = prometheus.NewDesc("machine_cpu_sockets", "Number of CPU sockets.", machineLabels, nil)
	machineMemDesc    = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", machineLabels, nil)
	machineSwapDesc   = prometheus.NewDesc("machine_swap_bytes", "Amount of swap memory available on the machine.", machineLabels, nil)
)

// machineCollector reads the host under root ("/"; a fixture in tests) at
// each scrape: the files are few and small, and a CPU brought online or
// swap added shows at once.
type machineCollector struct {
	root  string
	clock clock.PassiveClock
}

func (c *machineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{machineErrorDesc, machineCoresDesc, machinePhysDesc, machineSocketDesc, machineMemDesc, machineSwapDesc} {
		ch <- d
	}
}

func (c *machineCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clock.Now()
	mem, err := c.meminfo()
	cores, physical, sockets := c.cpus()
	if err != nil || cores == 0 {
		ch <- prometheus.MustNewConstMetric(machineErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(machineErrorDesc, prometheus.GaugeValue, 0)
	labels := []string{
		c.read("etc/machine-id"), c.read("sys/class/dmi/id/product_uuid"), c.read("proc/sys/kernel/random/boot_id"),
	}
	for _, v := range []struct {
		d *prometheus.Desc
		v uint64
	}{
		{machineCoresDesc, cores}, {machinePhysDesc, physical}, {machineSocketDesc, sockets},
		{machineMemDesc, mem["MemTotal"]}, {machineSwapDesc, mem["SwapTotal"]},
	} {
		ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, float64(v.v), labels...))
	}
}

func (c *machineCollector) read(p string) string {
	b, _ := os.ReadFile(filepath.Join(c.root, p))
	return strings.TrimSpace(string(b))
}

// meminfo is /proc/meminfo in bytes.
func (c *machineCollector) meminfo() (map[string]uint64, error) {
	f, err := os.Open(filepath.Join(c.root, "proc/meminfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		out[k] = n * 1024
	}
	return out, sc.Err()
}

// cpus counts the online logical CPUs, the distinct cores (package and
// core ID) and packages, as cAdvisor's topology reads sysfs; an offline
// CPU (online 0; cpu0 often has no such file) is not counted.
func (c *machineCollector) cpus() (logical, physical, sockets uint64) {
	dirs, _ := filepath.Glob(filepath.Join(c.root, "sys/devices/system/cpu/cpu[0-9]*"))
	cores, packages := map[string]bool{}, map[string]bool{}
	for _, d := range dirs {
		d = strings.TrimPrefix(d, c.root)
		if c.read(filepath.Join(d, "online")) == "0" {
			continue
		}
		pkg := c.read(filepath.Join(d, "topology/physical_package_id"))
		core := c.read(filepath.Join(d, "topology/core_id"))
		if pkg == "" || core == "" {
			continue
		}
		logical++
		cores[pkg+"/"+core] = true
		packages[pkg] = true
	}
	return logical, uint64(len(cores)), uint64(len(packages))
}
