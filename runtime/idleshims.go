package runtime

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"
	log "github.com/sirupsen/logrus"
)

// endIdleShims asks the shims of this containerd and namespace that were
// started for a container containerd no longer has to exit if they serve
// nothing. containerd asks a shim to exit after each task deletion, and
// cleans up after a shim whose bundle it finds at its start; but a kill of
// containerd in the middle of a deletion or a creation can remove the
// bundle (or never write its address) while the shim runs on, serving no
// task, known to no one, for good (seen in the crash test with hostlet and
// containerd killed together during a burst of deletions).
//
// Shutdown is what containerd itself sends: a shim that still serves a
// task ignores it, so asking one that serves other containers of its group
// (its first container deleted, the others alive) or another node's on the
// same containerd changes nothing. A shim's first container exists in
// containerd before the shim starts, so a shim in the middle of its first
// task's creation is never asked.
func (r *Runtime) endIdleShims(ctx context.Context) error {
	if r.endpoint == "" {
		return nil
	}
	shims, err := findShims(r.ns, r.endpoint)
	if err != nil || len(shims) == 0 {
		return err
	}
	sockets := shimSockets()
	var errs []error
	for _, s := range shims {
		if _, err := r.client.ContainerService().Get(ctx, s.id); !errdefs.IsNotFound(err) {
			continue // its container exists (or containerd did not say)
		}
		addr := sockets.of(s.pid)
		if addr == "" {
			continue
		}
		log.WithFields(log.Fields{"pid": s.pid, "container": s.id}).
			Info("asking a shim whose container is gone to exit if it serves nothing (containerd was killed before it did)")
		if err := shutdownShim(ctx, addr, s.id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shutdownShim sends a shim's task service Shutdown.
func shutdownShim(ctx context.Context, addr, id string) error {
	conn, err := net.DialTimeout("unix", addr, 5*time.Second)
	if err != nil {
		return nil // gone by itself
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = taskAPI.NewTTRPCTaskClient(client).Shutdown(ctx, &taskAPI.ShutdownRequest{ID: id})
	if err != nil && (errors.Is(err, ttrpc.ErrClosed) || strings.Contains(err.Error(), "closed")) {
		return nil // it exited while answering
	}
	return err
}

// runningShim is a shim process: its pid and the container it was started
// for (its -id).
type runningShim struct {
	pid int
	id  string
}

// findShims lists the containerd shims running for namespace ns of the
// containerd at address, from their command lines (containerd starts them
// as `containerd-shim-<name> -namespace <ns> -id <id> -address <addr>`).
func findShims(ns, address string) ([]runningShim, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []runningShim
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if id, ok := shimFor(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), ns, address); ok {
			out = append(out, runningShim{pid: pid, id: id})
		}
	}
	return out, nil
}

// shimFor returns the container id a shim's argv was started for, if argv
// is a containerd shim's of namespace ns and containerd address.
func shimFor(argv []string, ns, address string) (string, bool) {
	if len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim-") {
		return "", false
	}
	flags := map[string]string{}
	for i := 1; i+1 < len(argv); i++ {
		if name, ok := strings.CutPrefix(argv[i], "-"); ok {
			flags[strings.TrimPrefix(name, "-")] = argv[i+1]
		}
	}
	if flags["namespace"] != ns || flags["address"] != address || flags["id"] == "" {
		return "", false
	}
	return flags["id"], true
}

// unixSockets maps socket inodes to the paths of containerd's shim sockets.
type unixSockets map[string]string

// shimSockets reads the bound unix sockets under containerd's shim socket
// directory (<state dir>/s, whatever the daemon's own state dir) from
// /proc/net/unix: inode -> path.
func shimSockets() unixSockets {
	out := unixSockets{}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return out
	}
	defer f.Close()
	dir := filepath.Join(defaults.DefaultStateDir, "s") + "/"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && strings.HasPrefix(fields[7], dir) {
			out[fields[6]] = fields[7]
		}
	}
	return out
}

// of returns the path of the shim socket process pid holds, "" if none.
func (u unixSockets) of(pid int) string {
	fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(fds)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			if path := u[strings.TrimSuffix(ino, "]")]; path != "" {
				return path
			}
		}
	}
	return ""
}
