package hosttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shutdownGrace is the joined node's --shutdown-grace-period.
// 40 s: the TERM-ignoring pod gets 30 s, and the 10 s kept to kill it,
// tear its network down and write its status are what the emulated VM
// needs (more than 5 s, with 20 s).
const shutdownGrace = 40 * time.Second

// timings collects the figures the run reports at its end, and the
// product bugs the run found.
type timings struct {
	t     *testing.T
	lines []string
	bugs  []string
}

func (tm *timings) add(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	tm.t.Logf("timing: %s", s)
	tm.lines = append(tm.lines, s)
}

// TestDebianHost joins Debian 12 and 13 VMs (systemd as PID 1, cgroup v2)
// to a harness control plane as a user joins a host (the chart, then
// `hostlet join` with the token the notes print), once per cgroup driver
// (containerd's SystemdCgroup), and checks on the real host what no
// harness node shows: the node Ready, a pod's cgroup v2 limits, logs and
// exec through the API with a cluster-issued serving certificate, a
// service restart that restarts no container, a real `systemctl poweroff`
// with a pod that ignores TERM (graceful node shutdown through logind),
// the next boot, and `hostlet leave`.
func TestDebianHost(t *testing.T) {
	if os.Getenv("HOSTLET_HOSTTEST") != "1" {
		t.Skip("the host test boots a VM for minutes: run it with make hosttest (HOSTLET_HOSTTEST=1)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	tm := &timings{t: t}
	defer func() {
		t.Logf("timings:\n  %s", strings.Join(tm.lines, "\n  "))
		if len(tm.bugs) > 0 {
			t.Logf("product bugs found:\n  %s", strings.Join(tm.bugs, "\n  "))
		}
	}()

	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	suites := []string{"bookworm", "trixie"}
	if s := os.Getenv("HOSTTEST_SUITES"); s != "" {
		suites = strings.Split(s, ",")
	}
	imageOf := map[string]string{}
	for _, suite := range suites {
		t0 := time.Now()
		imageOf[suite] = buildImage(ctx, t, root, suite)
		b, _ := os.ReadFile(filepath.Join(imageOf[suite], "build-times"))
		tm.add("image %s ready in %v (its build: %s)", filepath.Base(imageOf[suite]), time.Since(t0).Round(time.Second), strings.TrimSpace(string(b)))
	}

	// What the host gets besides Debian's packages: containerd (Debian 12's
	// 1.6 is refused by preflight), runc, the images, and hostlet as a user
	// gets it: this commit's release (make release's hack/release, the amd64
	// .deb, image and chart) and, to upgrade from, the previous release's.
	binDir, err := harness.BuildComponents(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	helm, err := harness.BuildHelm(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	cache := cacheDir(t)
	t0 := time.Now()
	rel := currentRelease(ctx, t, root, cache, helm)
	tm.add("this release %s ready in %v", rel.version, time.Since(t0).Round(time.Second))
	t0 = time.Now()
	prev, upgrade := previousRelease(ctx, t, root, cache, helm)
	if upgrade {
		tm.add("previous release %s ready in %v", prev.version, time.Since(t0).Round(time.Second))
	}
	imgs, err := images.BuildAll(ctx, filepath.Join(cache, "images"))
	if err != nil {
		t.Fatal(err)
	}
	archives := []string{rel.image}
	debs := []string{rel.deb}
	if upgrade {
		archives = append(archives, prev.image)
		debs = append(debs, prev.deb)
	}
	for _, img := range imgs {
		archives = append(archives, img.Archive)
	}
	payload := makePayload(t, binDir, debs, archives)

	cluster, err := harness.Start(ctx, harness.Options{Logf: t.Logf, BinDir: binDir, NodeNetns: true,
		KeepDir: os.Getenv("HOSTTEST_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	n, err := newVMNet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.remove)
	t.Logf("VM network: namespace %s, VM %s, API server %s", n.netns, n.VMIP(), cluster.APIServerURL())

	// The chart as a user installs it: the release's package, its
	// approver image the release's (the chart's default, appVersion). With
	// an upgrade, the previous release's, upgraded with the node.
	chartRel := rel
	if upgrade {
		chartRel = prev
	}
	ch := &chart{helm: helm, values: chartValues(t, cluster)}
	server, token, caHash := ch.install(ctx, t, cluster, chartRel)

	drivers := []string{"systemd", "cgroupfs"}
	if s := os.Getenv("HOSTTEST_DRIVERS"); s != "" {
		drivers = strings.Split(s, ",")
	}
	for _, suite := range suites {
		for i, driver := range drivers {
			ok := t.Run(suite+"/"+driver, func(t *testing.T) {
				h := &host{t: t, tm: tm, cluster: cluster, net: n, image: imageOf[suite], payload: payload,
					name: suite + "/" + driver, driver: driver, node: "hosttest-" + suite + "-" + driver,
					server: server, token: token, caHash: caHash, release: rel, chart: ch}
				// Each suite's first driver starts from the previous
				// release and is upgraded; the others join with this one.
				if upgrade && i == 0 {
					h.previous = &prev
				}
				h.run(ctx)
			})
			if !ok {
				return
			}
		}
	}
}

// buildImage runs mkimage.sh (a no-op once cached) and returns its dir.
func buildImage(ctx context.Context, t *testing.T, root, suite string) string {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "test", "hosttest", "mkimage.sh"), suite)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mkimage.sh %s: %v", suite, err)
	}
	return strings.TrimSpace(string(out))
}

// cacheDir is $HOSTLET_CACHE or ~/.cache/hostlet, as build.sh's.
func cacheDir(t *testing.T) string {
	if c := os.Getenv("HOSTLET_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".cache", "hostlet")
}

// makePayload makes the VM's second disk: an ext4 image holding the
// binaries, the releases' packages, the image archives and setup.sh.
func makePayload(t *testing.T, binDir string, debs, archives []string) string {
	dir := filepath.Join(t.TempDir(), "payload")
	for _, d := range []string{"bin", "deb", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var size int64
	cp := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
		size += int64(len(b))
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		cp(filepath.Join(binDir, b), filepath.Join(dir, "bin", b))
	}
	for _, d := range debs {
		cp(d, filepath.Join(dir, "deb", filepath.Base(d)))
	}
	for _, a := range archives {
		cp(a, filepath.Join(dir, "images", filepath.Base(a)))
	}
	if err := os.WriteFile(filepath.Join(dir, "setup.sh"), []byte(setupScript), 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(filepath.Dir(dir), "payload.img")
	mb := size/(1<<20)*5/4 + 64
	out, err := exec.Command("mkfs.ext4", "-q", "-d", dir, img, fmt.Sprintf("%dM", mb)).CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs.ext4 payload: %v: %s", err, out)
	}
	os.RemoveAll(dir)
	return img
}

// setupScript installs, in the VM, what a user installs by hand besides
// Debian's packages: on Debian 12 containerd and runc (upstream's unit), on
// Debian 13 a config for Debian's containerd; a CNI network (the bridge
// plugin of Debian's containernetworking-plugins), the images, and the
// hostlet package with apt (offline: what it Depends on is in the image).
// $1 is the cgroup driver containerd's CRI config names (hostlet follows
// it), $2 the .deb's file name.
const setupScript = `#!/bin/sh
set -eu
driver=$1
deb=$2
p=/mnt/payload
systemd=false
[ "$driver" = systemd ] && systemd=true
mkdir -p /etc/containerd /etc/cni/net.d
if [ -x /usr/bin/containerd ]; then
	# Debian's containerd (Debian 13: 1.7, config version 2) and its runc.
	cat > /etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = $systemd
EOF
	# Debian 13's crun as a second handler (RuntimeClass crun): the runc
	# shim running crun in place of runc, as a user configures it.
	if [ -x /usr/bin/crun ]; then
		cat >> /etc/containerd/config.toml <<EOF
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
  SystemdCgroup = $systemd
EOF
	fi
	systemctl restart containerd
else
	install -m 755 $p/bin/containerd $p/bin/containerd-shim-runc-v2 $p/bin/ctr $p/bin/runc /usr/local/bin/
	cat > /etc/systemd/system/containerd.service <<'EOF'
[Unit]
Description=containerd container runtime
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
EOF
	cat > /etc/containerd/config.toml <<EOF
version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = $systemd
EOF
	systemctl daemon-reload
	systemctl enable --now containerd
fi
cat > /etc/cni/net.d/10-hosttest.conflist <<'EOF'
{"cniVersion": "1.0.0", "name": "hosttest", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
EOF
for i in $p/images/*.tar; do ctr -n hostlet images import "$i" >/dev/null; done
# The package as a user installs it; apt says which Recommends it skipped.
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p/deb/$deb" > /tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
sed -n '/^Recommended packages:/,/^[^ ]/p' /tmp/apt.log | grep '^ ' | sed 's/^ */apt skipped Recommends: /' >&2 || true
echo "$(dpkg-query -W -f '${Package} ${Version} ${Status}' hostlet), $(command -v hostlet) $(hostlet version 2>&1 | head -1)" >&2
crun=$(command -v crun >/dev/null && echo ", $(crun --version | head -1)" || true)
echo "$(command -v containerd) $(containerd --version | cut -d' ' -f3) ($(runc --version | head -1)$crun), $(ctr -n hostlet images ls -q | wc -l) images"
`

// host is one VM joined with one cgroup driver.
type host struct {
	t                     *testing.T
	tm                    *timings
	cluster               *harness.Cluster
	net                   *vmNet
	image, payload        string
	name, driver, node    string
	joinArgs              string // more `hostlet join` flags
	server, token, caHash string
	vm                    *vm
	ns                    string
	release               release  // this commit's
	previous              *release // the one to start from and upgrade, if any
	chart                 *chart
}

func (h *host) run(ctx context.Context) {
	t := h.t
	var err error
	if h.vm, err = newVM(t, h.image, t.TempDir(), h.net, h.payload); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.vm.Kill)
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpDiagnostics()
		}
	})
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	boot, err := h.vm.Boot(bctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: boot to ssh %v", h.name, boot.Round(100*time.Millisecond))
	facts := h.vm.Run(ctx, `stat -fc %T /sys/fs/cgroup; readlink /proc/1/exe; uname -r; . /etc/os-release; echo $PRETTY_NAME`)
	t.Logf("VM: %s", strings.ReplaceAll(strings.TrimSpace(facts), "\n", ", "))
	if !strings.HasPrefix(facts, "cgroup2fs\n") || !strings.Contains(facts, "systemd") {
		t.Fatalf("the VM is not a systemd host on cgroup v2: %s", facts)
	}

	t1 := time.Now()
	first := h.release
	if h.previous != nil {
		first = *h.previous
	}
	out := h.vm.Run(ctx, "mkdir -p /mnt/payload && mount -o ro /dev/vdb /mnt/payload && /mnt/payload/setup.sh "+h.driver+" "+debName(first))
	t.Logf("setup:\n%s", strings.TrimSpace(out))
	if !strings.Contains(out, "hostlet "+first.version) || !strings.Contains(out, "install ok installed") {
		t.Errorf("after apt-get install ./%s, hostlet is not installed as %s:\n%s", debName(first), first.version, out)
	}
	if regexp.MustCompile(`(?m)^/usr/bin/containerd `).MatchString(out) {
		// Debian's containerd 1.7 answers no CRI RuntimeConfig (2.0 does),
		// so hostlet cannot read the driver from it and takes the host's
		// (systemd): a user of the cgroupfs driver says so, as to a kubelet.
		h.joinArgs = " --cgroup-driver " + h.driver
	}
	h.tm.add("%s: containerd, hostlet and the images installed in %v", h.name, time.Since(t1).Round(100*time.Millisecond))

	h.join(ctx)
	h.ns = h.cluster.NewNamespace(t)
	if h.previous != nil {
		h.upgrade(ctx)
	}
	h.limitedPod(ctx)
	h.oomGroup(ctx)
	h.nfs(ctx)
	h.iscsi(ctx)
	h.logsAndExec(ctx)
	if strings.Contains(out, "crun version") {
		h.crun(ctx)
	}
	h.restartService(ctx)
	h.watchdog(ctx)
	h.poweroff(ctx)
	h.deleteEnded(ctx)
	h.leave(ctx)
}

// join runs `hostlet join` in the VM with the command the notes print and
// times it until the Node is Ready.
func (h *host) join(ctx context.Context) {
	t := h.t
	t0 := time.Now()
	out := h.vm.Run(ctx, fmt.Sprintf("hostlet join %s --token %s --discovery-token-ca-cert-hash %s --node-name %s "+
		"--hostlet-arg rotate-server-certificates=true --hostlet-arg shutdown-grace-period=%s%s 2>&1",
		h.server, h.token, h.caHash, h.node, shutdownGrace, h.joinArgs))
	joined := time.Since(t0)
	t.Logf("hostlet join:\n%s", out)
	if _, err := h.cluster.WaitForNode(ctx, h.node, 5*time.Minute, harness.NodeReady); err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: join returned after %v, node Ready %v after join began", h.name,
		joined.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	node, err := h.cluster.Client().CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP && a.Address != h.net.VMIP() {
			t.Errorf("node InternalIP %s, the VM's address is %s", a.Address, h.net.VMIP())
		}
	}
	unit := h.vm.Run(ctx, "systemctl is-active hostlet; systemctl is-enabled hostlet; journalctl -u hostlet -b --no-pager | grep -m1 -o 'msg=cgroups.*' || true")
	t.Logf("hostlet.service: %s", strings.ReplaceAll(strings.TrimSpace(unit), "\n", ", "))
	// Type=notify: active only once hostlet said READY=1; its watchdog
	// armed, and hostlet pinging it (its journal says so).
	show := h.vm.Run(ctx, "systemctl show hostlet -p Type -p WatchdogUSec -p ActiveState -p SubState; journalctl -u hostlet -b --no-pager | grep -q \"pinging systemd's watchdog while healthy\" && echo watchdog-pinged || true")
	if h.previous != nil {
		// The unit the previous release's join writes, which may predate
		// this one's (an upgrade keeps it: docs/upgrades.md).
		t.Logf("hostlet.service as %s's join wrote it: %s", h.previous.version, strings.ReplaceAll(strings.TrimSpace(show), "\n", ", "))
		return
	}
	for _, want := range []string{"Type=notify", "WatchdogUSec=30s", "ActiveState=active", "SubState=running"} {
		if !strings.Contains(show, want+"\n") {
			t.Errorf("hostlet.service lacks %s:\n%s", want, show)
		}
	}
	if !strings.Contains(show, "watchdog-pinged") {
		t.Errorf("hostlet does not say it pings the watchdog:\n%s", show)
	}
}

func (h *host) pod(name string, grace int64, limits v1.ResourceList, cmd ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name},
		Spec: v1.PodSpec{
			NodeName:                      h.node,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "c", Image: images.BusyboxRef, ImagePullPolicy: v1.PullNever,
				Command: cmd, Resources: v1.ResourceRequirements{Limits: limits, Requests: limits}}},
		},
	}
	return p
}

// limitedPod runs a pod with cpu and memory limits and reads the cgroup v2
// files of its container and pod in the VM.
func (h *host) limitedPod(ctx context.Context) {
	t := h.t
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	t0 := time.Now()
	h.cluster.CreatePod(t, h.pod("limited", 1, limits, "sh", "-c", "echo hello-hosttest; exec sleep 3601"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "limited", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: first pod Running %v after its creation", h.name, time.Since(t0).Round(100*time.Millisecond))
	out := h.vm.Run(ctx, `pid=$(pgrep -xf 'sleep 3601'); cg=$(sed -n 's/^0:://p' /proc/$pid/cgroup); echo $cg
for d in /sys/fs/cgroup$cg /sys/fs/cgroup$(dirname $cg); do echo $(cat $d/cpu.max) $(cat $d/memory.max); done`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("container cgroup %s: container cpu.max memory.max %q, pod %q", lines[0], lines[1], lines[2])
	if len(lines) != 3 || lines[1] != "50000 100000 67108864" || lines[2] != "50000 100000 67108864" {
		t.Errorf("cgroup v2 limits of the container and pod: %q, want cpu.max 50000 100000 and memory.max 67108864 for both", out)
	}
	wantSlice := map[string]string{"systemd": "/kubepods.slice/", "cgroupfs": "/kubepods/"}[h.driver]
	if !strings.HasPrefix(lines[0], wantSlice) {
		t.Errorf("with the %s driver the container's cgroup is %s, want one under %s", h.driver, lines[0], wantSlice)
	}
}

// oomGroup runs a container of two processes, one of which outgrows its
// memory limit: on cgroup v2 the kubelet (singleProcessOOMKill false, its
// default) sets memory.oom.group=1 in the container's cgroup, so the OOM
// kill takes the whole container, the other process too, rather than the
// kernel's one pick; the container ends OOMKilled (137), the pod Failed
// (restartPolicy Never), and the other process is gone from the host.
func (h *host) oomGroup(ctx context.Context) {
	t := h.t
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")}
	// dd's 64Mi buffer, read into from /dev/zero, passes the limit; with
	// only dd killed sh would go on sleeping, the container Running.
	h.cluster.CreatePod(t, h.pod("oom", 1, limits, "sh", "-c",
		"sleep 3602 & sleep 5; dd if=/dev/zero of=/dev/null bs=64M count=1; exec sleep 3603"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "oom", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	group := h.vm.Run(ctx, `pid=$(pgrep -xf 'sleep 3602'); cg=$(sed -n 's/^0:://p' /proc/$pid/cgroup); cat /sys/fs/cgroup$cg/memory.oom.group`)
	if strings.TrimSpace(group) != "1" {
		t.Errorf("the container's memory.oom.group: %q, want 1", group)
	}
	p, err := h.cluster.WaitForPod(ctx, h.ns, "oom", 2*time.Minute, harness.PodPhase(v1.PodFailed))
	if err != nil {
		t.Fatalf("the pod of the OOM: %v", err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.Reason != "OOMKilled" || cs[0].State.Terminated.ExitCode != 137 {
		t.Errorf("the container after the OOM: %+v", cs)
	}
	if left := strings.TrimSpace(h.vm.Run(ctx, `pgrep -xf 'sleep 3602|sleep 3603' || true`)); left != "" {
		t.Errorf("processes of the OOM-killed container still run: pids %s", left)
	}
}

// logsAndExec reads the pod's log and execs in it through the API server,
// which dials the node's kubelet API with the certificate the cluster
// issued it (the approver runs on this node).
func (h *host) logsAndExec(ctx context.Context) {
	t := h.t
	t0 := time.Now()
	var logs string
	err := poll(ctx, 5*time.Minute, func() error {
		var err error
		logs, err = h.cluster.Kubectl(ctx, "logs", "-n", h.ns, "limited")
		return err
	})
	if err != nil {
		t.Fatalf("kubectl logs: %v", err)
	}
	t.Logf("kubectl logs answered %v after the first try", time.Since(t0).Round(100*time.Millisecond))
	if strings.TrimSpace(logs) != "hello-hosttest" {
		t.Errorf("kubectl logs: %q", logs)
	}
	out, err := h.cluster.Kubectl(ctx, "exec", "-n", h.ns, "limited", "--", "cat", "/proc/self/cgroup")
	if err != nil {
		t.Fatalf("kubectl exec: %v", err)
	}
	t.Logf("kubectl exec cat /proc/self/cgroup: %q", out)
	// On cgroup v2 CRI gives each unprivileged container a cgroup namespace
	// of its own (containerd's container_create_linux.go): the container
	// sees its own cgroup as /sys/fs/cgroup, and what sizes itself by it
	// (a JVM, Go's GOMAXPROCS from 1.25, .NET) reads its limits there.
	if strings.TrimSpace(out) != "0::/" {
		h.bug("no cgroup namespace: a container on a cgroup v2 host sees its cgroup as %q (CRI: \"0::/\", a cgroup namespace of its own), "+
			"so /sys/fs/cgroup is the host's hierarchy, not the container's, and /sys/fs/cgroup/memory.max is not its limit (runtime has no CgroupNamespace in the spec)",
			strings.TrimSpace(out))
		return
	}
	out, err = h.cluster.Kubectl(ctx, "exec", "-n", h.ns, "limited", "--", "cat", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max")
	if err != nil || strings.Fields(out)[0] != "67108864" {
		t.Errorf("kubectl exec cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max: %q %v", out, err)
	}
}

// restartService restarts hostlet.service: the pod's container goes on
// (same process, no restart counted).
func (h *host) restartService(ctx context.Context) {
	t := h.t
	before := h.vm.Run(ctx, `pgrep -xf 'sleep 3601'`)
	h.vm.Run(ctx, "systemctl restart hostlet")
	// A new pod Running shows the restarted hostlet has synced.
	h.cluster.CreatePod(t, h.pod("after-restart", 1, nil, "sleep", "3602"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "after-restart", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	after := h.vm.Run(ctx, `pgrep -xf 'sleep 3601'`)
	p, err := h.cluster.Client().CoreV1().Pods(h.ns).Get(ctx, "limited", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before != after || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("after systemctl restart hostlet: container pid %q then %q, pod %s", strings.TrimSpace(before), strings.TrimSpace(after), harness.DescribePodStatus(p))
	}
}

// watchdog hangs hostlet (SIGSTOP: its process stops pinging systemd's
// watchdog) and wants systemd to restart it unaided: the unit's
// WatchdogSec runs out, systemd aborts the hung process (and kills it once
// the abort times out, a stopped process not acting on SIGABRT), and
// Restart=always starts hostlet again; the pod's container goes on.
func (h *host) watchdog(ctx context.Context) {
	t := h.t
	if wd := strings.TrimSpace(h.vm.Run(ctx, "systemctl show hostlet -p WatchdogUSec --value")); wd == "0" || wd == "infinity" || wd == "" {
		// The unit an older release's join wrote (an upgrade keeps it).
		t.Logf("hostlet.service has no watchdog (WatchdogUSec=%q): the hang is not tried", wd)
		return
	}
	before := h.vm.Run(ctx, `pgrep -xf 'sleep 3601'`)
	hung := strings.TrimSpace(h.vm.Run(ctx, "systemctl show hostlet -p MainPID --value"))
	h.vm.Run(ctx, "kill -STOP "+hung)
	t0 := time.Now()
	var state string
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		state = h.vm.Run(ctx, "systemctl show hostlet -p MainPID -p ActiveState -p SubState -p NRestarts")
		if !strings.Contains(state, "MainPID="+hung+"\n") && strings.Contains(state, "ActiveState=active\n") && strings.Contains(state, "SubState=running\n") {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if strings.Contains(state, "MainPID="+hung+"\n") || !strings.Contains(state, "SubState=running\n") {
		t.Fatalf("a hung hostlet (pid %s stopped) was not restarted by systemd's watchdog within 5 minutes:\n%s\n%s", hung, state,
			h.vm.Run(ctx, "journalctl -u hostlet -b --no-pager | tail -20"))
	}
	h.tm.add("%s: a hung hostlet restarted by systemd's watchdog %v after the hang", h.name, time.Since(t0).Round(time.Second))
	if j := h.vm.Run(ctx, "journalctl -u hostlet -b --no-pager | grep -c -i 'watchdog timeout' || true"); strings.TrimSpace(j) == "0" {
		t.Errorf("systemd's journal does not say the watchdog fired")
	}
	// A new pod Running shows the restarted hostlet has synced.
	h.cluster.CreatePod(t, h.pod("after-watchdog", 1, nil, "sleep", "3603"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "after-watchdog", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	if after := h.vm.Run(ctx, `pgrep -xf 'sleep 3601'`); after != before {
		t.Errorf("after the watchdog's restart: container pid %q then %q", strings.TrimSpace(before), strings.TrimSpace(after))
	}
}

// poweroff powers the VM off with `systemctl poweroff` while a pod that
// ignores TERM (grace 60 s, more than the node's shutdown grace) runs:
// logind's delay lock gives hostlet the grace period to kill it and write
// its final status, and systemd must then not wait on the pod's
// containers. The next boot brings hostlet back.
func (h *host) poweroff(ctx context.Context) {
	t := h.t
	h.cluster.CreatePod(t, h.pod("stubborn", 60, nil, "sh", "-c", "trap '' TERM; echo up; while true; do sleep 1; done"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "stubborn", 5*time.Minute, harness.PodPhase(v1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	consoleBefore := len(h.vm.console(h.vm.boots))
	t0 := time.Now()
	// ssh may lose the connection as the VM goes down.
	_, _ = h.vm.run(ctx, "systemctl poweroff")
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := h.vm.WaitExit(wctx)
	cancel()
	if err != nil {
		t.Fatalf("the VM did not power off: %v", err)
	}
	took := time.Since(t0)
	h.tm.add("%s: systemctl poweroff with a TERM-ignoring pod (grace 60s, node shutdown grace %v) took %v",
		h.name, shutdownGrace, took.Round(100*time.Millisecond))
	// What the console showed from the poweroff on: systemd's stop jobs
	// waiting on a unit, systemd-shutdown waiting on processes.
	console := h.vm.console(h.vm.boots)[consoleBefore:]
	for _, bad := range []string{"A stop job is running", "Waiting for process", "timed out"} {
		if i := strings.Index(console, bad); i >= 0 {
			j := strings.LastIndex(console[:i], "\n")
			k := strings.Index(console[i:], "\n")
			if k < 0 {
				k = len(console) - i
			}
			t.Errorf("shutdown waited on something after hostlet (%q on the console): %s", bad, console[j+1:i+k])
		}
	}
	for _, name := range []string{"stubborn", "limited", "after-restart"} {
		p, err := h.cluster.Client().CoreV1().Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after poweroff, %s: %s %s %q", name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Terminated" || p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("pod %s's status after poweroff is not the kubelet's shutdown status: %s", name, harness.DescribePodStatus(p))
		}
	}

	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	boot, err := h.vm.Boot(bctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: second boot to ssh %v", h.name, boot.Round(100*time.Millisecond))
	t1 := time.Now()
	// A node out of touch for long enough is tainted unreachable (NoExecute),
	// which a pod bound to it must tolerate: wait for it to be gone.
	if _, err := h.cluster.WaitForNode(ctx, h.node, 5*time.Minute, readyUntainted); err != nil {
		t.Fatal(err)
	}
	h.cluster.CreatePod(t, h.pod("after-boot", 1, nil, "sh", "-c", "echo booted"))
	if _, err := h.cluster.WaitForPod(ctx, h.ns, "after-boot", 5*time.Minute, harness.PodPhase(v1.PodSucceeded)); err != nil {
		t.Fatal(err)
	}
	h.tm.add("%s: a pod ran to completion %v after ssh was up again", h.name, time.Since(t1).Round(100*time.Millisecond))
}

// deleteEnded deletes the pods that ended, as a user cleans up, and waits
// for them to be gone from the API (the node removes them once it has
// cleaned up after them).
func (h *host) deleteEnded(ctx context.Context) {
	t := h.t
	names := []string{"stubborn", "limited", "after-restart", "after-boot"}
	for _, name := range names {
		if err := h.cluster.Client().CoreV1().Pods(h.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if err := poll(ctx, 3*time.Minute, func() error {
			_, err := h.cluster.Client().CoreV1().Pods(h.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("pod %s still there: %v", name, err)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// leave runs `hostlet leave` in the VM: the Node goes, and so do what
// join wrote; what else stays on the host (pods, containers, logs of pods
// deleted before, the logind drop-in, kubepods cgroups) is a bug.
func (h *host) leave(ctx context.Context) {
	t := h.t
	// Read now, not right after the boot: there the previous boot's journal
	// came back empty (twice), here it does not.
	prev := h.vm.Run(ctx, `journalctl -b -1 --no-pager -o short-precise | grep -E 'hostlet\[[0-9]+\]: .*(shutdown|inhibit)|hostlet.service' | tail -25`)
	t.Logf("hostlet's shutdown in the journal of the boot before:\n%s", prev)
	// Each pod's stop, step by step, from the shutdown event on: what a
	// slow shutdown waited on.
	stops := h.vm.Run(ctx, `journalctl -b -1 -u hostlet --no-pager -o short-precise | sed -n '/detected new shutdown event/,$p' | grep -v 'level=debug' | head -80`)
	t.Logf("hostlet's journal of the boot before, from the shutdown event on:\n%s", stops)
	out := h.vm.Run(ctx, "hostlet leave 2>&1")
	t.Logf("hostlet leave:\n%s", out)
	if _, err := h.cluster.Client().CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Node %s after leave: %v", h.node, err)
	}
	left := h.vm.Run(ctx, `systemctl is-active hostlet || true; ls -d /var/lib/hostlet /etc/systemd/system/hostlet.service 2>/dev/null || true
echo pod dirs: $(ls /var/lib/kubelet/pods 2>/dev/null); echo containers: $(ctr -n hostlet c ls -q)
echo container logs: $(ls /var/log/containers 2>/dev/null); echo logind drop-in: $(ls /etc/systemd/logind.conf.d 2>/dev/null)
echo cgroups: $(find /sys/fs/cgroup -maxdepth 2 -name 'kubepods*' 2>/dev/null)`)
	t.Logf("on the host after leave:\n%s", left)
	if strings.Contains(left, "/var/lib/hostlet") || strings.Contains(left, "hostlet.service") {
		t.Errorf("leave left what join wrote:\n%s", left)
	}
	for _, line := range strings.Split(left, "\n") {
		if what, rest, ok := strings.Cut(line, ": "); ok && strings.TrimSpace(rest) != "" {
			h.bug("leftovers after a reboot and hostlet leave (issue 26 item 4): %s: %s", what, rest)
		}
	}
}

// dumpDiagnostics logs hostlet's and containerd's journal and the console
// when the test failed.
func (h *host) dumpDiagnostics() {
	t := h.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := h.vm.run(ctx, "journalctl --no-pager -b -u hostlet -u containerd | tail -150"); err == nil {
		t.Logf("journal (hostlet, containerd):\n%s", out)
	} else {
		t.Logf("no journal: %v", err)
	}
	t.Logf("console tail:\n%s", h.vm.consoleTail(h.vm.boots))
}

// poll calls f until it succeeds or timeout passes, returning f's last
// error then. For what only trying tells (the API server's dial to the
// node's kubelet API with a certificate not issued yet).
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

// readyUntainted: Ready with no NoExecute taint (the node lifecycle
// controller's not-ready and unreachable ones).
func readyUntainted(n *v1.Node) (bool, error) {
	for _, taint := range n.Spec.Taints {
		if taint.Effect == v1.TaintEffectNoExecute {
			return false, nil
		}
	}
	return harness.NodeReady(n)
}

// bug reports a product bug the host test checks for (those it found on
// its first runs: leftovers after leave, no cgroup namespace on v2): it
// fails the test, and is collected for the run's summary so that one run
// names them all.
func (h *host) bug(format string, args ...any) {
	h.t.Helper()
	msg := h.name + ": " + fmt.Sprintf(format, args...)
	h.tm.bugs = append(h.tm.bugs, msg)
	h.t.Errorf("PRODUCT BUG: %s", msg)
}
