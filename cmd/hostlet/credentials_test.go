package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/provider/credentialprovider"
)

// The plugins are on with either flag, as the kubelet's, and what does not
// load stops the node with the kubelet's reason; the feature gate decides
// whether tokenAttributes is allowed.
func TestCredentialProviderFlags(t *testing.T) {
	parse := func(args ...string) *options {
		t.Helper()
		var o options
		if err := o.parse(args); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	if ps, m, err := credentialProviders(parse(), nil); err != nil || ps.(credentialprovider.NodeCredentials).Plugins != nil || m != nil {
		t.Errorf("without flags: %v, %v", ps, err)
	}
	dir := t.TempDir()
	if _, _, err := credentialProviders(parse("--image-credential-provider-bin-dir", filepath.Join(dir, "absent")), nil); err == nil ||
		!strings.Contains(err.Error(), "plugin binary directory "+filepath.Join(dir, "absent")+" did not exist") {
		t.Errorf("absent bin dir: %v", err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: p
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["*.example.com"]
  defaultCacheDuration: 1m
  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: ServiceAccount}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--image-credential-provider-config", cfg, "--image-credential-provider-bin-dir", dir}
	if _, _, err := credentialProviders(parse(args...), nil); err == nil || !strings.Contains(err.Error(), "plugin binary executable "+filepath.Join(dir, "p")+" did not exist") {
		t.Errorf("absent plugin: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ps, metrics, err := credentialProviders(parse(args...), nil)
	if err != nil || ps.(credentialprovider.NodeCredentials).Plugins == nil || len(metrics) != 3 {
		t.Fatalf("loaded: %v, %d metrics, %v", ps, len(metrics), err)
	}
	_, _, err = credentialProviders(parse(append(args, "--feature-gates", "KubeletServiceAccountTokenForCredentialProviders=false")...), nil)
	if err == nil || !strings.Contains(err.Error(), "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled") {
		t.Errorf("gate off: %v", err)
	}
}
