package hosttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// vmNet is the network a VM lives in: a namespace of its own holding a
// bridge with the VM's tap, linked to the root namespace by a veth pair.
// Its addresses are a /29 of 10.241.0.0/16 no route or address of the
// machine uses: .1 the root end of the pair, .2 the namespace's end, .5 the
// bridge (the VM's gateway), .6 the VM. The root namespace routes the VM's
// /30 through the pair, so the test's ssh and the API server (which
// dials the node's kubelet API) reach the VM, and the VM reaches the API
// server at an address of the root namespace; nothing goes anywhere else.
type vmNet struct {
	netns string // name under /run/netns; hlvm-<owner pid>
	veth  string // root end of the pair
	base  net.IP // the /29
}

const vmNetBase = "10.241"

func (n *vmNet) ip(host byte) string {
	b := n.base.To4()
	return net.IPv4(b[0], b[1], b[2], b[3]+host).String()
}

func (n *vmNet) rootIP() string   { return n.ip(1) }
func (n *vmNet) nsIP() string     { return n.ip(2) }
func (n *vmNet) bridgeIP() string { return n.ip(5) }

// VMIP is the VM's address, the joined node's InternalIP.
func (n *vmNet) VMIP() string { return n.ip(6) }

func (n *vmNet) path() string { return filepath.Join("/run/netns", n.netns) }

// newVMNet removes the namespaces of earlier runs whose owner is gone, then
// sets up one for this process on a free /29.
func newVMNet() (*vmNet, error) {
	removeStaleVMNets()
	used, err := usedPrefixes()
	if err != nil {
		return nil, err
	}
	n := &vmNet{netns: fmt.Sprintf("hlvm-%d", os.Getpid()), veth: fmt.Sprintf("hlvm%d", os.Getpid())}
	if len(n.veth) > 15 {
		n.veth = n.veth[:15]
	}
	for i := 0; i < 256*32; i++ {
		base := net.ParseIP(fmt.Sprintf("%s.%d.%d", vmNetBase, i/32, (i%32)*8))
		cand := &net.IPNet{IP: base, Mask: net.CIDRMask(29, 32)}
		if overlapsAny(cand, used) {
			continue
		}
		n.base = base
		break
	}
	if n.base == nil {
		return nil, errors.New("no free /29 in " + vmNetBase + ".0.0/16")
	}
	if err := n.setup(); err != nil {
		n.remove()
		return nil, err
	}
	return n, nil
}

func (n *vmNet) setup() error {
	ns := n.netns
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", n.rootIP() + "/30", "dev", n.veth},
		{"ip", "link", "set", n.veth, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", n.nsIP() + "/30", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", n.rootIP()},
		{"ip", "-n", ns, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", ns, "addr", "add", n.bridgeIP() + "/30", "dev", "br0"},
		{"ip", "-n", ns, "link", "set", "br0", "up"},
		{"ip", "-n", ns, "tuntap", "add", "tap0", "mode", "tap"},
		{"ip", "-n", ns, "link", "set", "tap0", "master", "br0"},
		{"ip", "-n", ns, "link", "set", "tap0", "up"},
		{"ip", "route", "add", n.ip(4) + "/30", "via", n.nsIP(), "dev", n.veth},
		{"nsenter", "--net=" + n.path(), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// remove deletes the pair (its route goes with it) and the namespace.
func (n *vmNet) remove() {
	exec.Command("ip", "link", "del", n.veth).Run()
	exec.Command("ip", "netns", "delete", n.netns).Run()
}

// removeStaleVMNets deletes hlvm-<pid> namespaces (and their pairs) whose
// pid is no longer running: a run killed before its cleanup.
func removeStaleVMNets() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "hlvm-"))
		if err != nil || !strings.HasPrefix(e.Name(), "hlvm-") {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue
		}
		(&vmNet{netns: e.Name(), veth: fmt.Sprintf("hlvm%d", pid)}).remove()
	}
}

// usedPrefixes are the machine's IPv4 routes and addresses.
func usedPrefixes() ([]*net.IPNet, error) {
	var used []*net.IPNet
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if dst == "local" || dst == "broadcast" || dst == "unreachable" || dst == "blackhole" {
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, p, err := net.ParseCIDR(dst); err == nil {
			used = append(used, p)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok && p.IP.To4() != nil {
			used = append(used, p)
		}
	}
	return used, nil
}

func overlapsAny(p *net.IPNet, used []*net.IPNet) bool {
	for _, u := range used {
		if u.Contains(p.IP) || p.Contains(u.IP) {
			return true
		}
	}
	return false
}

// vm is one Debian VM: the cached image under a copy-on-write overlay of
// its own, booted (and booted again) under qemu with TCG in its network
// namespace, driven over ssh as root.
type vm struct {
	t       *testing.T
	image   string // mkimage.sh's directory
	dir     string // overlay, payload, console logs
	net     *vmNet
	payload string // a second, read-only disk (/dev/vdb) with what the test brings
	boots   int
	qemu    *exec.Cmd
	exited  chan struct{}
	exitErr error
	cpus    int
}

func newVM(t *testing.T, image, dir string, n *vmNet, payload string) (*vm, error) {
	v := &vm{t: t, image: image, dir: dir, net: n, payload: payload, cpus: 1}
	if s := os.Getenv("HOSTTEST_SMP"); s != "" {
		v.cpus, _ = strconv.Atoi(s)
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw",
		"-b", filepath.Join(image, "disk.img"), filepath.Join(dir, "overlay.qcow2")).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("qemu-img create: %v: %s", err, out)
	}
	return v, nil
}

// consolePath is the serial console log of boot i (1-based).
func (v *vm) consolePath(i int) string { return filepath.Join(v.dir, fmt.Sprintf("console-%d.log", i)) }

// Boot starts qemu and returns once ssh answers, and how long that took.
func (v *vm) Boot(ctx context.Context) (time.Duration, error) {
	v.boots++
	// TCG: these machines' /dev/kvm (kvm_pvm) offers no vmx/svm, -cpu host
	// aborts there and Debian's kernel stalls under it.
	args := []string{"--net=" + v.net.path(), "--", "qemu-system-x86_64",
		"-name", "hosttest", "-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(v.cpus), "-m", "3072",
		"-display", "none", "-vga", "none", "-monitor", "none", "-serial", "file:" + v.consolePath(v.boots),
		"-kernel", filepath.Join(v.image, "vmlinuz"), "-initrd", filepath.Join(v.image, "initrd.img"),
		"-append", fmt.Sprintf("root=/dev/vda rw console=ttyS0 net.ifnames=0 ip=%s::%s:255.255.255.252:hosttest:eth0:off",
			v.net.VMIP(), v.net.bridgeIP()),
		"-drive", "file=" + filepath.Join(v.dir, "overlay.qcow2") + ",format=qcow2,if=virtio,cache=unsafe",
		"-drive", "file=" + v.payload + ",format=raw,if=virtio,readonly=on",
		"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56",
		"-device", "virtio-rng-pci",
		"-no-reboot",
	}
	cmd := exec.Command("nsenter", args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	v.qemu, v.exited = cmd, make(chan struct{})
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		v.exitErr = err
		close(v.exited)
	}()
	for {
		select {
		case <-v.exited:
			return 0, fmt.Errorf("qemu exited during boot: %v; console:\n%s", v.exitErr, v.consoleTail(v.boots))
		case <-ctx.Done():
			return 0, fmt.Errorf("ssh not up: %w; console:\n%s", ctx.Err(), v.consoleTail(v.boots))
		case <-time.After(time.Second):
		}
		// The VM is booting: nothing tells the host when sshd listens but
		// trying it.
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := v.run(sctx, "true")
		cancel()
		if err == nil {
			return time.Since(t0), nil
		}
	}
}

// WaitExit waits for qemu to exit (the guest powered off: -no-reboot).
func (v *vm) WaitExit(ctx context.Context) error {
	select {
	case <-v.exited:
		return v.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kill stops qemu if it runs.
func (v *vm) Kill() {
	if v.qemu == nil {
		return
	}
	select {
	case <-v.exited:
	default:
		v.qemu.Process.Kill()
		<-v.exited
	}
}

// console is the serial console's output of boot i so far.
func (v *vm) console(i int) string {
	b, _ := os.ReadFile(v.consolePath(i))
	return string(b)
}

func (v *vm) consoleTail(i int) string {
	b := v.console(i)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return b
}

// run runs a shell command in the VM as root and returns its output
// (stdout and stderr).
func (v *vm) run(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "ssh", "-i", filepath.Join(v.image, "id_ed25519"),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5",
		"root@"+v.net.VMIP(), script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in the VM: %q: %w: %s", script, err, out)
	}
	return string(out), nil
}

// Run is run for a step that must work.
func (v *vm) Run(ctx context.Context, script string) string {
	v.t.Helper()
	out, err := v.run(ctx, script)
	if err != nil {
		v.t.Fatal(err)
	}
	return out
}
