package harness

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownedEntries are the names the harness creates in a cluster dir. A dir
// the caller chose (Options.Dir) may hold other things: only these are
// swept, unmounted and removed there. A temp dir is the harness's entirely.
var ownedEntries = []string{"logs", "pki", "etcd", "containerd", "cni", "hostlet", "kubeconfig", "hosts"}

// cleanupSpec says what cleanupLeftovers may touch.
type cleanupSpec struct {
	dir       string
	temp      bool   // dir was made by the harness: all of it is ours
	bridge    string // CNI bridge to delete
	netns     string // the node's network namespace (Options.NodeNetns) to delete
	veth      string // and its veth pair
	runc      string // runc binary for shims' containers (empty: from PATH)
	removeDir bool   // remove the dir's contents (all if temp, else owned entries)
	cgroup    string // the cluster's cgroup root, removed in every hierarchy
	spare     map[int]bool
}

func (s cleanupSpec) roots() []string {
	if s.temp {
		return []string{s.dir}
	}
	var r []string
	for _, e := range ownedEntries {
		r = append(r, filepath.Join(s.dir, e))
	}
	return r
}

// cleanupLeftovers removes everything a cluster may leave on the host once
// its own processes are stopped (or dead): processes whose command line
// names a path in the cluster's roots (containerd shims, a crashed cluster's
// daemons) plus their descendants (the containers), mounts below the roots
// (overlay rootfs, netns bind mounts, tmpfs volumes), the CNI bridge, the
// node's network namespace and veth pair and,
// if asked, the files. Processes in spare are left alone.
func cleanupLeftovers(s cleanupSpec, logf func(string, ...any)) {
	if s.dir == "" || filepath.Clean(s.dir) == "/" {
		return
	}
	roots := s.roots()
	killProcsUnder(roots, s.runc, s.spare, logf)
	if s.cgroup != "" {
		if err := RemoveCgroupRoot(s.cgroup); err != nil {
			logf("harness: %v", err)
		}
	}
	for _, r := range roots {
		if err := unmountUnder(r); err != nil {
			logf("harness: %v", err)
		}
	}
	if err := deleteLink(s.bridge); err != nil {
		logf("harness: %v", err)
	}
	removeHostNets(s.netns, logf)
	if err := removeNodeNet(s.netns, s.veth); err != nil {
		logf("harness: %v", err)
	}
	if !s.removeDir {
		return
	}
	for _, r := range roots {
		if err := os.RemoveAll(r); err != nil {
			logf("harness: remove %s: %v", r, err)
		}
	}
	if !s.temp {
		os.Remove(s.dir) // only if nothing else is in it
	}
}

// procInfo is what we need from /proc/<pid>.
type procInfo struct {
	pid, ppid int
	args      []string
	zombie    bool
}

func listProcs() map[int]*procInfo {
	ents, _ := os.ReadDir("/proc")
	out := map[int]*procInfo{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		var args []string
		for _, a := range bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
			args = append(args, string(a))
		}
		out[pid] = &procInfo{pid: pid, ppid: ppid, args: args, zombie: f[0] == "Z"}
	}
	return out
}

// killProcsUnder SIGKILLs every process whose command line refers to a path
// under one of roots, and all their descendants. Descendants are collected before
// anything is killed: once a shim dies its containers are reparented and
// can no longer be found through it. Never touches this process or its
// ancestors (e.g. `localcluster up --dir DIR` itself).
func killProcsUnder(roots []string, runc string, spare map[int]bool, logf func(string, ...any)) {
	procs := listProcs()
	protected := map[int]bool{}
	for pid := range spare {
		protected[pid] = true
	}
	for pid := os.Getpid(); pid > 1; {
		protected[pid] = true
		p, ok := procs[pid]
		if !ok {
			break
		}
		pid = p.ppid
	}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	victims := map[int]bool{}
	var shims []shimInfo
	var add func(int)
	add = func(pid int) {
		if victims[pid] || protected[pid] {
			return
		}
		victims[pid] = true
		for _, c := range children[pid] {
			add(c)
		}
	}
	for _, p := range procs {
		if protected[p.pid] || p.zombie {
			continue
		}
		for _, a := range p.args {
			if argMentions(a, roots) {
				add(p.pid)
				if s, ok := parseShim(p.args); ok {
					shims = append(shims, s)
				}
				break
			}
		}
	}
	if len(victims) == 0 {
		return
	}
	for pid := range victims {
		logf("harness: killing leftover process %d %s", pid, strings.Join(procs[pid].args, " "))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pid := range victims {
		for time.Now().Before(deadline) {
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil || bytes.Contains(st, []byte(") Z ")) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, s := range shims {
		s.cleanup(runc, logf)
	}
}

// argMentions reports whether a command-line argument names a root or a
// path below it ("/r", "/r/x", "--flag=/r", "unix:///r/x.sock"), taking care
// that root /tmp/a does not match /tmp/ab.
func argMentions(arg string, roots []string) bool {
	val := arg
	if i := strings.IndexByte(arg, '='); i >= 0 {
		val = arg[i+1:]
	}
	for _, r := range roots {
		r = filepath.Clean(r)
		if arg == r || val == r || strings.Contains(arg, r+"/") {
			return true
		}
	}
	return false
}

// shimInfo identifies a containerd-shim-runc-v2 from its command line
// (`-namespace NS -id ID -address ADDR`).
type shimInfo struct{ ns, id, addr string }

func parseShim(args []string) (shimInfo, bool) {
	var s shimInfo
	if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
		return s, false
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-namespace", "--namespace":
			s.ns = args[i+1]
		case "-id", "--id":
			s.id = args[i+1]
		case "-address", "--address":
			s.addr = args[i+1]
		}
	}
	return s, s.ns != "" && s.id != "" && s.addr != ""
}

// cleanup does what a killed shim can no longer do itself: remove its
// socket, which containerd's pkg/shim.SocketAddress puts at
// /run/containerd/s/sha256(ADDR/NS/ID), and have runc delete the container's
// state and cgroups. runc's state lives in a host-global root
// (/run/containerd/runc/NS/ID unless the client chose another), so a leftover
// would make the next container with the same ID fail ("already exists").
func (s shimInfo) cleanup(runc string, logf func(string, ...any)) {
	os.Remove(fmt.Sprintf("/run/containerd/s/%x", sha256.Sum256([]byte(filepath.Join(s.addr, s.ns, s.id)))))
	root := filepath.Join("/run/containerd/runc", s.ns)
	if _, err := os.Stat(filepath.Join(root, s.id)); err != nil {
		return
	}
	if runc == "" {
		runc = "runc"
	}
	if out, err := exec.Command(runc, "--root", root, "delete", "--force", s.id).CombinedOutput(); err != nil {
		logf("harness: runc delete --force %s: %v: %s", s.id, err, out)
		os.RemoveAll(filepath.Join(root, s.id))
	}
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 5 {
			continue
		}
		mp := unescapeMount(fs[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, s.Err()
}

// unmountUnder lazily unmounts everything at or below dir. Several passes:
// a path can be mounted over more than once.
func unmountUnder(dir string) error {
	var last []string
	for pass := 0; pass < 5; pass++ {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		last = mps
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	return fmt.Errorf("could not unmount under %s: %v", dir, last)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
