package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// registryDir records every live harness instance on the machine (tmpfs, so
// it empties at reboot together with the bridges it describes). It serves
// two purposes: concurrent clusters never pick the same pod subnet, and a
// cluster whose owning process died without Stop (test binary killed by a
// timeout, ^C) is cleaned up by the next Start: its shims, containers,
// mounts and bridge would otherwise live forever.
var registryDir = "/run/hostlet-harness"

// instance is one cluster's registry record.
type instance struct {
	ID      string `json:"id"`
	PID     int    `json:"pid"`
	Start   uint64 `json:"start"` // owner's start time, guards against pid reuse
	Dir     string `json:"dir"`
	KeepDir bool   `json:"keepDir"`
	Temp    bool   `json:"temp"` // Dir was created by the harness
	Bridge  string `json:"bridge"`
	Subnet  string `json:"subnet"`
	BinDir  string `json:"binDir"`
	// The node's own network namespace (Options.NodeNetns), if any.
	NodeNetns  string `json:"nodeNetns,omitempty"`
	NodeVeth   string `json:"nodeVeth,omitempty"`
	NodeSubnet string `json:"nodeSubnet,omitempty"`
}

func (in *instance) path() string { return filepath.Join(registryDir, in.ID+".json") }

func (in *instance) alive() bool {
	st, zombie, err := procStat(in.PID)
	return err == nil && !zombie && st == in.Start
}

// withRegistryLock runs fn holding an exclusive flock on the registry.
func withRegistryLock(fn func() error) error {
	if err := os.MkdirAll(registryDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(registryDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn()
}

func loadInstances() []*instance {
	files, _ := filepath.Glob(filepath.Join(registryDir, "*.json"))
	var out []*instance
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		in := &instance{}
		if json.Unmarshal(b, in) == nil && in.ID != "" {
			out = append(out, in)
		}
	}
	return out
}

func (in *instance) save() error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return os.WriteFile(in.path(), b, 0o644)
}

// reserve reaps dead instances, checks that dir is not used by a live one,
// picks a free subnet and bridge name and records the new instance.
func reserve(dir, binDir string, temp, keepDir, nodeNetns bool, logf func(string, ...any)) (*instance, error) {
	self, _, err := procStat(os.Getpid())
	if err != nil {
		return nil, err
	}
	in := &instance{ID: newBridgeName()[2:] + strconv.Itoa(os.Getpid()), PID: os.Getpid(), Start: self,
		Dir: dir, Temp: temp, KeepDir: keepDir, Bridge: newBridgeName(), BinDir: binDir}
	err = withRegistryLock(func() error {
		taken := map[string]bool{}
		for _, old := range loadInstances() {
			if old.alive() {
				if old.Dir == dir {
					return fmt.Errorf("dir %s is in use by a running cluster (pid %d)", dir, old.PID)
				}
				taken[old.Subnet] = true
				taken[old.Bridge] = true
				taken[old.NodeSubnet] = true
				taken[old.NodeVeth] = true
				continue
			}
			logf("harness: cleaning up leftovers of dead cluster %s (pid %d, dir %s)", old.ID, old.PID, old.Dir)
			cleanupLeftovers(cleanupSpec{dir: old.Dir, temp: old.Temp, bridge: old.Bridge, netns: old.NodeNetns,
				veth: old.NodeVeth, runc: filepath.Join(old.BinDir, "runc"), removeDir: !old.KeepDir, cgroup: old.cgroupRoot()}, logf)
			os.Remove(old.path())
		}
		for taken[in.Bridge] {
			in.Bridge = newBridgeName()
		}
		s, err := pickSubnet(podCIDRBase, taken)
		if err != nil {
			return err
		}
		in.Subnet = s
		if nodeNetns {
			in.NodeNetns = "hlnode-" + in.ID
			for in.NodeVeth = newBridgeName(); taken[in.NodeVeth] || in.NodeVeth == in.Bridge; {
				in.NodeVeth = newBridgeName()
			}
			taken[s] = true
			if in.NodeSubnet, err = pickSubnet(nodeNetBase, taken); err != nil {
				return err
			}
		}
		return in.save()
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

func (in *instance) release() {
	_ = withRegistryLock(func() error { return os.Remove(in.path()) })
}

// procStat returns field 22 of /proc/<pid>/stat (start time, clock ticks
// since boot) and whether the process is a zombie (dead, not yet reaped: a
// SIGKILLed owner can linger like that for a moment).
func procStat(pid int) (start uint64, zombie bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("bad stat for %d", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, false, fmt.Errorf("bad stat for %d", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0] == "Z" || f[0] == "X", err
}
