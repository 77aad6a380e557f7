package node

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Eviction signals hostlet understands, as the kubelet names them.
const (
	SignalMemoryAvailable            = "memory.available"
	SignalNodeFsAvailable            = "nodefs.available"
	SignalNodeFsInodesFree           = "nodefs.inodesFree"
	SignalImageFsAvailable           = "imagefs.available"
	SignalImageFsInodesFree          = "imagefs.inodesFree"
	SignalPIDAvailable               = "pid.available"
	SignalAllocatableMemoryAvailable = "allocatableMemory.available"
	signalContainerFsAvail           = "containerfs.available"
	signalContainerFsInodes          = "containerfs.inodesFree"
	unsupportedEvictionSigFmt        = "unsupported eviction signal %v"
)

// signalCondition is the node condition each signal drives.
var signalCondition = map[string]v1.NodeConditionType{
	SignalMemoryAvailable:            v1.NodeMemoryPressure,
	SignalAllocatableMemoryAvailable: v1.NodeMemoryPressure,
	SignalNodeFsAvailable:            v1.NodeDiskPressure,
	SignalNodeFsInodesFree:           v1.NodeDiskPressure,
	SignalImageFsAvailable:           v1.NodeDiskPressure,
	SignalImageFsInodesFree:          v1.NodeDiskPressure,
	signalContainerFsAvail:           v1.NodeDiskPressure,
	signalContainerFsInodes:          v1.NodeDiskPressure,
	SignalPIDAvailable:               v1.NodePIDPressure,
}

// Threshold is one eviction threshold (--eviction-hard or --eviction-soft):
// the signal is below it when fewer than Quantity (or Percentage of the
// total) are available.
type Threshold struct {
	Signal     string
	Quantity   *resource.Quantity
	Percentage float64 // 0..1
}

// Value resolves the threshold against the signal's total.
func (t Threshold) Value(total int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(float64(total) * t.Percentage)
}

// Thresholds are parsed --eviction-hard (or --eviction-soft) settings, keyed
// by signal.
type Thresholds map[string]Threshold

// ParseThresholds validates --eviction-hard as the kubelet does: unknown
// signals, negative or zero quantities and percentages above 100% are
// errors; "0%" and "100%" switch a signal off.
func ParseThresholds(statements map[string]string) (Thresholds, error) {
	out := Thresholds{}
	names := make([]string, 0, len(statements))
	for k := range statements {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, signal := range names {
		val := strings.TrimSpace(statements[signal])
		if _, ok := signalCondition[signal]; !ok {
			return nil, fmt.Errorf(unsupportedEvictionSigFmt, signal)
		}
		if pct, ok := strings.CutSuffix(val, "%"); ok {
			if val == "0%" || val == "100%" {
				continue
			}
			f, err := strconv.ParseFloat(pct, 32)
			if err != nil {
				return nil, err
			}
			f /= 100
			if f < 0 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be >= 0%%: %s", signal, val)
			}
			if f > 1 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be <= 100%%: %s", signal, val)
			}
			out[signal] = Threshold{Signal: signal, Percentage: f}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("eviction threshold %v must be positive: %s", signal, &q)
		}
		out[signal] = Threshold{Signal: signal, Quantity: &q}
	}
	return out, nil
}

// Limit is the threshold against the signal's total as a quantity: its
// own when given as one (so it prints as configured), else the percentage.
func (t Threshold) Limit(total int64) *resource.Quantity {
	if t.Quantity != nil {
		return t.Quantity
	}
	return resource.NewQuantity(t.Value(total), resource.BinarySI)
}

// Observation is one signal's reading: what is available of its capacity.
type Observation struct {
	Available, Capacity int64
}

// Observations are the readings of every signal the host gives, by signal.
type Observations map[string]Observation

// Met lists the thresholds the observations cross, ordered by signal; a
// signal without an observation crosses nothing.
func (ts Thresholds) Met(obs Observations) []Threshold {
	var out []Threshold
	for signal, t := range ts {
		if o, ok := obs[signal]; ok && o.Available < t.Value(o.Capacity) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Signal < out[j].Signal })
	return out
}

// WithAllocatable adds the kubelet's allocatableMemory.available hard
// threshold, memory.available's measured on the pods' cgroup (kubepods),
// as the kubelet does while it enforces node allocatable on pods (its
// default).
func (ts Thresholds) WithAllocatable() Thresholds {
	t, ok := ts[SignalMemoryAvailable]
	if _, set := ts[SignalAllocatableMemoryAvailable]; !ok || set {
		return ts
	}
	out := make(Thresholds, len(ts)+1)
	for k, v := range ts {
		out[k] = v
	}
	t.Signal = SignalAllocatableMemoryAvailable
	out[SignalAllocatableMemoryAvailable] = t
	return out
}

// Condition is the node condition a signal drives.
func Condition(signal string) v1.NodeConditionType { return signalCondition[signal] }

// reservation is what a hard threshold takes off allocatable, as the
// kubelet's node allocatable reservation does (memory and nodefs only).
func (ts Thresholds) reservation(capacity v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for signal, name := range map[string]v1.ResourceName{
		SignalMemoryAvailable: v1.ResourceMemory,
		SignalNodeFsAvailable: v1.ResourceEphemeralStorage,
	} {
		t, ok := ts[signal]
		c, has := capacity[name]
		if !ok || !has {
			continue
		}
		out[name] = *resource.NewQuantity(t.Value(c.Value()), resource.BinarySI)
	}
	return out
}
