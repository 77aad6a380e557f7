package main

import (
	"os"
	"path/filepath"
	"testing"
)

// leave finds hostlet's pods where hostlet put them: the config file join
// wrote, with the flags hostlet ran with besides it (hidden ones too)
// winning over it.
func TestLeaveReadsHostletSettings(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte("root-dir: /srv/kubelet\npod-logs-dir: /srv/pods\ncontainerd-namespace: k8s.io\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := hostletOptions(conf, map[string]string{"pod-logs-dir": "/x/pods", "container-logs-dir": "/x/containers"})
	if err != nil {
		t.Fatal(err)
	}
	if o.rootDir != "/srv/kubelet" || o.podLogsDir != "/x/pods" || o.containerLogsDir != "/x/containers" || o.containerdNS != "k8s.io" {
		t.Errorf("root %s, pod logs %s, container logs %s, namespace %s", o.rootDir, o.podLogsDir, o.containerLogsDir, o.containerdNS)
	}
	if _, err := hostletOptions(conf, map[string]string{"no-such-flag": "1"}); err == nil {
		t.Error("an unknown hostlet flag was taken")
	}

	// As join writes them now: a KubeletConfiguration and its flags file.
	if err := os.WriteFile(conf, []byte(kcHeader+"podLogsDir: /srv/pods\ncontainerRuntimeEndpoint: unix:///run/c.sock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err = hostletOptions(conf, map[string]string{"root-dir": "/srv/kubelet", "containerd-namespace": "k8s.io", "container-logs-dir": "/x/containers"})
	if err != nil {
		t.Fatal(err)
	}
	if o.rootDir != "/srv/kubelet" || o.podLogsDir != "/srv/pods" || o.containerLogsDir != "/x/containers" || o.containerdNS != "k8s.io" || o.runtimeEndpoint != "unix:///run/c.sock" {
		t.Errorf("root %s, pod logs %s, container logs %s, namespace %s, endpoint %s", o.rootDir, o.podLogsDir, o.containerLogsDir, o.containerdNS, o.runtimeEndpoint)
	}
}

// After the cleanup, the directories hostlet made for pods go if empty;
// one still holding something (not hostlet's) stays, as does its content.
func TestRemoveEmptyDirs(t *testing.T) {
	root := t.TempDir()
	empty, full := filepath.Join(root, "pods"), filepath.Join(root, "logs")
	for _, d := range []string{empty, full} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kept := filepath.Join(full, "someone-elses.log")
	if err := os.WriteFile(kept, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removeEmptyDirs(empty, full, filepath.Join(root, "missing"))
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("empty dir left: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a file in a non-empty dir: %v", err)
	}
}
