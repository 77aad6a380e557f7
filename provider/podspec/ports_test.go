package podspec

import (
	"reflect"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
)

func TestPortMappings(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Ports: []v1.ContainerPort{
			{ContainerPort: 80},                    // no host port: CNI gets nothing
			{ContainerPort: 8080, HostPort: 30080}, // protocol unset: TCP
			{ContainerPort: 53, HostPort: 30053, Protocol: v1.ProtocolUDP, HostIP: "10.0.0.1"},
			{ContainerPort: 53, HostPort: 30053, Protocol: v1.ProtocolUDP, HostIP: "10.0.0.1"}, // twice in one container
			{Name: "x", ContainerPort: 9000, HostPort: 31000, Protocol: v1.ProtocolSCTP},
			{Name: "x", ContainerPort: 9001, HostPort: 31001}, // a name used twice
		}},
		// The same key in another container counts again, as the kubelet's.
		{Name: "b", Ports: []v1.ContainerPort{{ContainerPort: 8080, HostPort: 30080, Protocol: v1.ProtocolTCP, HostIP: "fd00::1"}}},
	}}}
	want := []runtime.PortMapping{
		{HostPort: 30080, ContainerPort: 8080, Protocol: "tcp"},
		{HostPort: 30053, ContainerPort: 53, Protocol: "udp", HostIP: "10.0.0.1"},
		{HostPort: 31000, ContainerPort: 9000, Protocol: "sctp"},
		{HostPort: 30080, ContainerPort: 8080, Protocol: "tcp", HostIP: "fd00::1"},
	}
	if got := portMappings(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	pod.Spec.HostNetwork = true
	if got := portMappings(pod); got != nil {
		t.Errorf("host network: %+v", got)
	}
}
