package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

// --registry-mirror needs the cluster CA to check the nodes against; a
// node without the flag has no mirror at all.
func TestNewMirror(t *testing.T) {
	client := fake.NewClientset()
	if m, _, err := newMirror(&options{}, client, &tls.Config{}, "n"); m != nil || err != nil {
		t.Errorf("without the flag: %v %v", m, err)
	}
	if _, _, err := newMirror(&options{registryMirror: true}, client, &tls.Config{}, "n"); err == nil || !strings.Contains(err.Error(), "--client-ca-file") {
		t.Errorf("without a client CA: %v", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("no certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newMirror(&options{registryMirror: true, clientCA: notPEM}, client, &tls.Config{}, "n"); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("a CA file without certificates: %v", err)
	}
}
