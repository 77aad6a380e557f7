// Command localcluster runs a local hostlet development cluster for
// `make dev`:
//
//	localcluster up --dir DIR [--hostlet BIN] [--images DIR] [--node NAME]
//	localcluster down --dir DIR
//
// `up` starts the control plane, containerd and (with --hostlet) a hostlet
// node, imports every *.tar in --images, writes DIR/kubeconfig and then
// DIR/ready, and stays in the foreground until SIGTERM/SIGINT, when it
// stops everything. `down` signals the running `up` (DIR/localcluster.pid)
// and waits for it to exit.
//
// The node gets the harness's flags, eviction thresholds included
// (harness.EvictionHard, not the kubelet's defaults): a dev machine's disk
// is often fuller than 85%, and DiskPressure would taint the node and
// reclaim the imported images, which cannot be pulled back.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localcluster up --dir DIR [--hostlet BIN] [--images DIR] [--node NAME]\n       localcluster down --dir DIR")
	os.Exit(2)
}

func pidFile(dir string) string { return filepath.Join(dir, "localcluster.pid") }

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory (required; a previous cluster's state in it is replaced)")
	hostletBin := fs.String("hostlet", "", "hostlet binary to run as a node")
	images := fs.String("images", "", "directory of *.tar OCI archives to import")
	node := fs.String("node", "hostlet-dev", "node name for hostlet")
	// A real node address, as in a cluster: the API server's node proxy
	// refuses loopback ones, and NodePorts need one.
	netns := fs.Bool("node-netns", true, "run containerd and hostlet in a network namespace of their own with a real address")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("--dir is required")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if pid, ok := runningPid(abs); ok {
		return fmt.Errorf("already running in %s (pid %d); run `localcluster down --dir %s` first", abs, pid, abs)
	}

	// A ready file left by a crashed run must not make `make dev` think
	// this one is up. The pid file goes in before Start so that `down`
	// works even while starting (Start leaves files it does not own alone).
	ready := filepath.Join(abs, "ready")
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	os.Remove(ready)
	if err := os.WriteFile(pidFile(abs), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(abs))

	// Signals are caught from the start so that ^C or `down` during Start
	// still tears down what was started.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
	}
	c, err := harness.Start(ctx, harness.Options{Dir: abs, KeepDir: true, Logf: logf, NodeNetns: *netns})
	if err != nil {
		return err
	}
	defer c.Stop()

	if *images != "" {
		archives, _ := filepath.Glob(filepath.Join(*images, "*.tar"))
		for _, a := range archives {
			if err := c.ImportImage(ctx, a); err != nil {
				return err
			}
			logf("imported %s", a)
		}
	}
	if *hostletBin != "" {
		h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: *hostletBin, NodeName: *node})
		if err != nil {
			return err
		}
		logf("hostlet node %s ready (log %s)", *node, h.LogPath())
	}
	// c.KubeconfigPath() is DIR/kubeconfig already; ready comes last.
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		return err
	}
	fmt.Printf(`local cluster is up (state and logs in %s)
  export KUBECONFIG=%s
  kubectl:    %s
  containerd: %s (namespace %s; ctr -a %s -n %s ...)
  logs:       %s
stop with: localcluster down --dir %s   (or SIGTERM pid %d)
`, abs, c.KubeconfigPath(), filepath.Join(c.BinDir(), "kubectl"), c.ContainerdSocket(), harness.ContainerdNamespace,
		c.ContainerdSocket(), harness.ContainerdNamespace, c.LogDir(), abs, os.Getpid())

	<-ctx.Done()
	logf("stopping")
	os.Remove(ready)
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory of the running cluster")
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for it to stop")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("--dir is required")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	pid, ok := runningPid(abs)
	if !ok {
		fmt.Println("not running")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			fmt.Println("stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still running after %v", pid, *timeout)
}

// runningPid reads the pid file and checks the process is a live
// localcluster (not a recycled pid).
func runningPid(dir string) (int, bool) {
	b, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	// A zombie (SIGKILLed, not yet reaped) has an empty cmdline.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.Contains(string(cmdline), "localcluster") {
		return 0, false
	}
	return pid, true
}
