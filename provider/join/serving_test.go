package join

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestServingTemplate(t *testing.T) {
	addrs := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: v1.NodeHostName, Address: "host-a"},
		{Type: v1.NodeInternalDNS, Address: "host-a.internal"},
		{Type: v1.NodeExternalIP, Address: "not-an-ip"},
		{Type: v1.NodeHostName, Address: ""},
	}
	req := ServingTemplate("host-a", addrs)
	if req == nil {
		t.Fatal("no template")
	}
	if req.Subject.CommonName != "system:node:host-a" || fmt.Sprint(req.Subject.Organization) != "[system:nodes]" {
		t.Errorf("subject %v", req.Subject)
	}
	if got := fmt.Sprint(req.DNSNames); got != "[host-a host-a.internal]" {
		t.Errorf("DNS names %s", got)
	}
	if got := fmt.Sprint(req.IPAddresses); got != "[10.0.0.5 203.0.113.7]" {
		t.Errorf("IPs %s", got)
	}
	// No IP yet (the Node is not registered): no request, as the kubelet.
	if req := ServingTemplate("host-a", []v1.NodeAddress{{Type: v1.NodeHostName, Address: "host-a"}}); req != nil {
		t.Errorf("a template without IPs: %v", req)
	}
}
