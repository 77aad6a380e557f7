package importcheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/hostlet/hostlet/test/images"
)

const namespace = "hostlet-importcheck"

func binDir(t *testing.T) string {
	if d := os.Getenv("HOSTLET_BIN"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	return filepath.Join(home, ".cache/hostlet/bin")
}

// startContainerd runs a private containerd under dir and returns its socket.
func startContainerd(t *testing.T, bin, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.podsandbox.controller.v1.podsandbox"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "containerd"), "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = withPath(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		unmountUnder(dir)
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("containerd log:\n%s", b)
			}
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not create its socket")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withPath puts bin first in PATH: the shim finds runc through it.
func withPath(bin string) []string {
	return append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
}

// unmountUnder detaches any mount left below dir so it can be removed.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- { // deepest last mounted, first out
		syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

func TestImportAndRun(t *testing.T) {
	if os.Getenv("HOSTLET_TEST_CONTAINERD") == "" {
		t.Skip("set HOSTLET_TEST_CONTAINERD=1 to run against a private containerd")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := binDir(t)
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("missing %s: %v", b, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	imgs, err := images.BuildAll(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sock := startContainerd(t, bin, t.TempDir())
	ctr := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "ctr"), append([]string{"-a", sock, "-n", namespace}, args...)...)
		cmd.Env = withPath(bin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String(), err
	}

	// The busybox archive goes through ctr, the testapp ones through the
	// Go client, which is what hostlet itself uses.
	if _, err := ctr("images", "import", imgs[0].Archive); err != nil {
		t.Fatal(err)
	}
	client, err := containerd.New(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	nsctx := namespaces.WithNamespace(ctx, namespace)
	for _, img := range imgs[1:] {
		f, err := os.Open(img.Archive)
		if err != nil {
			t.Fatal(err)
		}
		got, err := client.Import(nsctx, f)
		f.Close()
		if err != nil {
			t.Fatalf("Import %s: %v", img.Archive, err)
		}
		if len(got) != 1 || got[0].Name != img.Ref {
			t.Fatalf("Import %s named %v, want %s", img.Archive, got, img.Ref)
		}
	}
	list, err := ctr("images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if !strings.Contains(list, img.Ref+"\n") {
			t.Errorf("%s not listed:\n%s", img.Ref, list)
		}
	}

	for _, tc := range []struct {
		ref  string
		args []string
		want string
	}{
		{images.BusyboxRef, []string{"echo", "hi"}, "hi\n"},
		{images.TestappRef, []string{"/testapp", "--log=from-testapp"}, "from-testapp\n"},
	} {
		id := fmt.Sprintf("importcheck-%d", time.Now().UnixNano())
		out, err := ctr(append([]string{"run", "--rm", tc.ref, id}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if out != tc.want {
			t.Errorf("%s %q printed %q, want %q", tc.ref, tc.args, out, tc.want)
		}
	}

	// Pulls from the loopback registry answer its basic auth challenge.
	reg, err := images.StartRegistry("127.0.0.1:0", &images.BasicAuth{User: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ref, err := reg.Push(ctx, imgs[0], "library/busybox:1.35")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctr("images", "pull", "--plain-http", ref); err == nil || !strings.Contains(err.Error(), "authorization") {
		t.Errorf("pull without credentials: %v, want an authorization failure", err)
	}
	if _, err := ctr("images", "pull", "--plain-http", "--user", "alice:s3cret", ref); err != nil {
		t.Error(err)
	}
}
