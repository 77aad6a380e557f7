package runtime

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Swap behaviors, as the kubelet's memorySwap.swapBehavior.
const (
	SwapNoSwap      = "NoSwap"
	SwapLimitedSwap = "LimitedSwap"
)

// SwapOn reports whether the host swaps: procSwaps (/proc/swaps) lists a
// device below its header, as the kubelet's swap.IsSwapOn reads it.
func SwapOn(procSwaps string) (bool, error) {
	f, err := os.Open(procSwaps)
	if err != nil {
		return false, err
	}
	defer f.Close()
	lines := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.TrimSpace(s.Text()) != "" {
			lines++
		}
	}
	return lines > 1, s.Err()
}

// SwapControllerAvailable reports whether the kernel accounts swap per
// cgroup, as the kubelet checks it: memory.memsw.limit_in_bytes on v1,
// memory.swap.max in hostlet's own cgroup on v2. root is /sys/fs/cgroup.
func SwapControllerAvailable(root string, v2 bool) bool {
	p := filepath.Join(root, "memory", "memory.memsw.limit_in_bytes")
	if v2 {
		own := "/"
		if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(l, "0::"); ok {
					own = rest
				}
			}
		}
		p = filepath.Join(root, own, "memory.swap.max")
	}
	_, err := os.Stat(p)
	return err == nil
}

// SwapCapacity is SwapTotal of meminfo (/proc/meminfo) in bytes.
func SwapCapacity(meminfo string) int64 {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "SwapTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
