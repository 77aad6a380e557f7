package e2e

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// kubectl cp both ways (tar through exec, stdin in and stdout out): a file
// and a directory tree into the pod, and a tree back out, byte for byte.
func TestCp(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := cluster.CreatePod(t, busybox(ns, "box", "sleep", "3600"))
	waitPhase(t, ns, pod.Name, v1.PodRunning)

	local := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 64*1024+3) // > 1 MiB, not a multiple of a tar block
	if err := os.WriteFile(filepath.Join(local, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(local, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Into the pod.
	if out, err := cluster.Kubectl(ctxT(t), "cp", filepath.Join(local, "big.bin"), ns+"/box:/tmp/big.bin"); err != nil {
		t.Fatalf("kubectl cp into the pod: %v %s", err, out)
	}
	if out, err := cluster.Kubectl(ctxT(t), "cp", tree, ns+"/box:/tmp/tree"); err != nil {
		t.Fatalf("kubectl cp a directory into the pod: %v %s", err, out)
	}
	if got := execIn(t, ns, "box", "c", "md5sum", "/tmp/big.bin"); got[:32] != md5hex(big) {
		t.Errorf("copied file in the pod: %s", got)
	}
	if got := execIn(t, ns, "box", "c", "cat", "/tmp/tree/a.txt", "/tmp/tree/sub/b.txt"); got != "alpha\nbeta\n" {
		t.Errorf("copied tree in the pod: %q", got)
	}

	// Out of the pod, a file and the tree made there.
	execIn(t, ns, "box", "c", "sh", "-c", "mkdir -p /tmp/made/deep && echo gamma > /tmp/made/deep/g.txt && cp /tmp/big.bin /tmp/made/")
	back := filepath.Join(t.TempDir(), "back.bin")
	if out, err := cluster.Kubectl(ctxT(t), "cp", ns+"/box:/tmp/big.bin", back); err != nil {
		t.Fatalf("kubectl cp out of the pod: %v %s", err, out)
	}
	if b, err := os.ReadFile(back); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("file copied out: %d bytes, %v", len(b), err)
	}
	made := filepath.Join(t.TempDir(), "made")
	if out, err := cluster.Kubectl(ctxT(t), "cp", ns+"/box:/tmp/made", made); err != nil {
		t.Fatalf("kubectl cp a directory out of the pod: %v %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(made, "deep", "g.txt")); err != nil || string(b) != "gamma\n" {
		t.Fatalf("tree copied out: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(made, "big.bin")); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("big file in the tree copied out: %d bytes, %v", len(b), err)
	}
}

func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}
