package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// cgroupRoot is the kubelet's cgroupRoot: its QoS and pod cgroups go below
// it, away from any other kubelet's /kubepods on the machine.
const cgroupRoot = "/hostlet-bench"

// lockRun makes the run exclusive on the machine (fixed link names, the
// cgroup root, the kernel settings saved): a second one fails at once.
func lockRun(path string) (unlock func() error, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another bench is running (%s is locked): %w", path, err)
	}
	return f.Close, nil
}

// kubeletSysctls are the kernel settings the kubelet rewrites at start
// (setupKernelTunables, protectKernelDefaults=false). This is a shared
// machine: they are put back when the run ends.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// saveSysctls records the current values in file and returns the function
// that restores them and removes the file. A file left by a run that was
// killed before restoring is restored from first.
func saveSysctls(file string) (restore func() error, err error) {
	if b, err := os.ReadFile(file); err == nil {
		var stale map[string]string
		if err := json.Unmarshal(b, &stale); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if err := writeSysctls(stale); err != nil {
			return nil, fmt.Errorf("restoring the kernel settings of a killed run: %w", err)
		}
	}
	saved := map[string]string{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = strings.TrimSpace(string(b))
		}
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return nil, err
	}
	return func() error {
		if err := writeSysctls(saved); err != nil {
			return err
		}
		return os.Remove(file)
	}, nil
}

func writeSysctls(values map[string]string) error {
	var errs []error
	for k, v := range values {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
