package runtime

import (
	"strings"
	"testing"
	"time"

	cgroup1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func metric(t *testing.T, v any) *types.Metric {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(v)
	if err != nil {
		t.Fatal(err)
	}
	return &types.Metric{ID: "c", Timestamp: timestamppb.New(time.Unix(100, 0)), Data: a}
}

func TestDecodeMetricCgroup1(t *testing.T) {
	st, err := decodeMetric(metric(t, &cgroup1.Metrics{
		CPU: &cgroup1.CPUStat{Usage: &cgroup1.CPUUsage{Total: 3_000_000_000}},
		Memory: &cgroup1.MemoryStat{
			Usage:             &cgroup1.MemoryEntry{Usage: 100 << 20, Limit: 256 << 20},
			TotalInactiveFile: 30 << 20, InactiveFile: 1, // total_* counts the hierarchy
			TotalRSS: 60 << 20, TotalPgFault: 7, TotalPgMajFault: 2,
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerStats{Time: time.Unix(100, 0), CPUUsageNanos: 3e9, MemoryUsage: 100 << 20,
		WorkingSet: 70 << 20, RSS: 60 << 20, PageFaults: 7, MajorPageFaults: 2, MemoryLimit: 256 << 20}
	if !st.Time.Equal(want.Time) {
		t.Errorf("time %v, want %v", st.Time, want.Time)
	}
	st.Time = want.Time
	if st != want {
		t.Errorf("got %+v\nwant %+v", st, want)
	}
}

func TestDecodeMetricCgroup2(t *testing.T) {
	st, err := decodeMetric(metric(t, &cgroup2.Metrics{
		CPU:    &cgroup2.CPUStat{UsageUsec: 1_500_000},
		Memory: &cgroup2.MemoryStat{Usage: 80 << 20, UsageLimit: 128 << 20, InactiveFile: 100 << 20, Anon: 10 << 20, Pgfault: 3, Pgmajfault: 1},
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Inactive file above usage (counted at another moment) clamps to 0.
	if st.CPUUsageNanos != 1_500_000_000 || st.MemoryUsage != 80<<20 || st.WorkingSet != 0 || st.RSS != 10<<20 ||
		st.PageFaults != 3 || st.MajorPageFaults != 1 || st.MemoryLimit != 128<<20 {
		t.Errorf("got %+v", st)
	}
}

func TestDecodeMetricUnknown(t *testing.T) {
	if _, err := decodeMetric(metric(t, &types.Metric{ID: "x"})); err == nil {
		t.Error("a message of another type decoded")
	}
	if _, err := decodeMetric(&types.Metric{ID: "x"}); err == nil {
		t.Error("a metric without data decoded")
	}
}

func TestParseNetDev(t *testing.T) {
	const dev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 123456     100    1    2    0     0          0         0    65432      50    3    4    0     0       0          0
`
	got, err := parseNetDev(strings.NewReader(dev))
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceStats{{Name: "eth0", RxBytes: 123456, RxPackets: 100, RxErrors: 1, RxDropped: 2,
		TxBytes: 65432, TxPackets: 50, TxErrors: 3, TxDropped: 4}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
