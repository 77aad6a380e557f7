package podspec

import (
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

// A volumeMount's propagation as the kubelet gives it to CRI; Bidirectional
// only in a privileged container, refused otherwise with API validation's
// message, and an unknown mode with the kubelet's.
func TestMountPropagation(t *testing.T) {
	mode := func(m v1.MountPropagationMode) *v1.MountPropagationMode { return &m }
	yes, no := true, false
	privileged := &v1.SecurityContext{Privileged: &yes}
	for _, c := range []struct {
		name string
		mode *v1.MountPropagationMode
		sc   *v1.SecurityContext
		want runtime.Propagation
		err  string
	}{
		{name: "unset", want: runtime.PropagationPrivate},
		{name: "None", mode: mode(v1.MountPropagationNone), want: runtime.PropagationPrivate},
		{name: "HostToContainer", mode: mode(v1.MountPropagationHostToContainer), want: runtime.PropagationHostToContainer},
		{name: "Bidirectional privileged", mode: mode(v1.MountPropagationBidirectional), sc: privileged, want: runtime.PropagationBidirectional},
		{name: "Bidirectional", mode: mode(v1.MountPropagationBidirectional),
			err: "volumeMounts[1].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers"},
		{name: "Bidirectional privileged false", mode: mode(v1.MountPropagationBidirectional), sc: &v1.SecurityContext{Privileged: &no},
			err: "volumeMounts[1].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers"},
		{name: "unknown", mode: mode("Sideways"), err: `invalid MountPropagation mode: "Sideways"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctr := &v1.Container{Name: "c", SecurityContext: c.sc}
			got, err := mountPropagation(ctr, 1, v1.VolumeMount{Name: "v", MountPath: "/v", MountPropagation: c.mode})
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%v %v, want %v", got, err, c.want)
			}
		})
	}
}
