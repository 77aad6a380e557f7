package join

import (
	"fmt"
	"os"
	"path/filepath"
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

func TestRemoveServingPairs(t *testing.T) {
	l := Layout{StateDir: t.TempDir()}
	if err := l.removeServingPairs(); err != nil {
		t.Fatalf("without a config file: %v", err)
	}
	root := t.TempDir()
	pki := filepath.Join(root, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kubelet-server-2026-11-23-18-00-00.pem", "other.pem"} {
		if err := os.WriteFile(filepath.Join(pki, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("kubelet-server-2026-11-23-18-00-00.pem", filepath.Join(pki, "kubelet-server-current.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.ConfigFile(), []byte("root-dir: "+root+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.removeServingPairs(); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(pki)
	if len(left) != 1 || left[0].Name() != "other.pem" {
		t.Fatalf("left %v in %s, want only other.pem", left, pki)
	}
}
