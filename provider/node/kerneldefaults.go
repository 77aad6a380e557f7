package node

import (
	"fmt"
	"sort"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/component-helpers/node/util/sysctl"
)

// kernelDefaults are the kernel tunables the kubelet wants of its host
// (its container manager's setupKernelTunables): overcommit always, the
// OOM killer rather than a panic on OOM, a reboot 10 s after a panic, a
// panic on an oops, and root's key quotas.
var kernelDefaults = map[string]int{
	sysctl.VMOvercommitMemory: sysctl.VMOvercommitMemoryAlways,
	sysctl.VMPanicOnOOM:       sysctl.VMPanicOnOOMInvokeOOMKiller,
	sysctl.KernelPanic:        sysctl.KernelPanicRebootTimeout,
	sysctl.KernelPanicOnOops:  sysctl.KernelPanicOnOopsAlways,
	sysctl.RootMaxKeys:        sysctl.RootMaxKeysSetting,
	sysctl.RootMaxBytes:       sysctl.RootMaxBytesSetting,
}

// CheckKernelDefaults is the kubelet's protectKernelDefaults: each tunable
// that differs from what the kubelet wants is an error, with the
// kubelet's message, and the node does not start. hostlet never changes
// them (the kubelet without protectKernelDefaults sets them).
func CheckKernelDefaults(s sysctl.Interface) error {
	names := make([]string, 0, len(kernelDefaults))
	for n := range kernelDefaults {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		want := kernelDefaults[name]
		got, err := s.GetSysctl(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got != want {
			errs = append(errs, fmt.Errorf("invalid kernel flag: %v, expected value: %v, actual value: %v", name, want, got))
		}
	}
	return utilerrors.NewAggregate(errs)
}
