package node

import (
	"strings"
	"testing"

	"k8s.io/component-helpers/node/util/sysctl"
	sysctltesting "k8s.io/component-helpers/node/util/sysctl/testing"
)

// protectKernelDefaults passes a host tuned as the kubelet wants it and
// names each tunable that differs, as the kubelet's error does.
func TestCheckKernelDefaults(t *testing.T) {
	s := sysctltesting.NewFake()
	for name, v := range kernelDefaults {
		if err := s.SetSysctl(name, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckKernelDefaults(s); err != nil {
		t.Fatalf("a host tuned as the kubelet wants: %v", err)
	}
	_ = s.SetSysctl(sysctl.VMOvercommitMemory, 0)
	_ = s.SetSysctl(sysctl.KernelPanic, 0)
	err := CheckKernelDefaults(s)
	if err == nil {
		t.Fatal("two tunables off their defaults passed")
	}
	for _, want := range []string{"invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0", "invalid kernel flag: kernel/panic, expected value: 10, actual value: 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
