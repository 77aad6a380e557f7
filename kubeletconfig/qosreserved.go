package kubeletconfig

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ParseQOSReserved is the kubelet's parse of qosReserved at start (its
// cm.ParseQOSReserved, whose errors stop it whatever the QOSReserved gate
// says): memory only, as a percentage from 0 to 100.
func ParseQOSReserved(m map[string]string) (map[v1.ResourceName]int64, error) {
	out := map[v1.ResourceName]int64{}
	for k, v := range m {
		if v1.ResourceName(k) != v1.ResourceMemory {
			return nil, fmt.Errorf("cannot reserve %q resource", k)
		}
		if !strings.HasSuffix(v, "%") {
			return nil, fmt.Errorf("failed to parse percentage %q for %q resource: percentage expected, got '%s'", v, k, v)
		}
		p, err := strconv.ParseInt(strings.TrimRight(v, "%"), 10, 0)
		if err != nil {
			return nil, fmt.Errorf("failed to parse percentage %q for %q resource: invalid number in percentage '%s'", v, k, v)
		}
		if p < 0 || p > 100 {
			return nil, fmt.Errorf("failed to parse percentage %q for %q resource: percentage must be between 0 and 100", v, k)
		}
		out[v1.ResourceName(k)] = p
	}
	return out, nil
}
