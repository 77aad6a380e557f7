package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/hostlet/hostlet/test/harness"
)

// joinName is the node the i-th join of a target adds: another node of the
// same kind beside the measured one, which keeps running.
func joinName(node string, i int) string { return fmt.Sprintf("%s-join%d", node, i) }

// joinCgroupRoot is the joined kubelet's cgroupRoot: a kubelet removes pod
// cgroups under its root that it does not know, so two kubelets cannot
// share one.
const joinCgroupRoot = cgroupRoot + "-join"

// bootstrap is the cluster side of a join, set up once for both nodes as a
// user sets it up for hostlet: charts/hostlet installed with helm (the
// bootstrap token Secret, kube-public/cluster-info signed by the
// controller-manager's bootstrapsigner, and kubeadm's RBAC: the token's
// group bound to system:node-bootstrapper and to the csrapprover's
// nodeclient role). The kubelet bootstraps with the same token, so the
// same bindings get its CSR approved.
type bootstrap struct {
	server, token, caHash, caFile string
}

// newToken is a random bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}.
func newToken() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b[:6]) + "." + string(b[6:])
}

// prepareBootstrap installs the chart with a fresh token and waits until
// cluster-info carries the token's signature, which join verifies.
func prepareBootstrap(ctx context.Context, c *harness.Cluster) (*bootstrap, error) {
	helm, err := harness.BuildHelm(ctx, func(f string, a ...any) { log.Debugf(f, a...) })
	if err != nil {
		return nil, err
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	bs := &bootstrap{server: c.APIServerURL(), token: newToken(), caFile: c.CACertFile()}
	if bs.caHash, err = harness.CACertHash(bs.caFile); err != nil {
		return nil, err
	}
	// No cluster DNS to publish: the harness runs none, and join goes on
	// without (it warns).
	if _, err := c.Helm(ctx, helm, "install", "hostlet", filepath.Join(root, "charts", "hostlet"), "--namespace", "kube-system",
		"--set", "bootstrapToken.token="+bs.token, "--set", "clusterInfo.server="+bs.server,
		"--set", "clusterDNS.publish=false"); err != nil {
		return nil, err
	}
	id, _, _ := strings.Cut(bs.token, ".")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cm, err := c.Client().CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err == nil && cm.Data["jws-kubeconfig-"+id] != "" {
			return bs, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster-info not signed for token %s after 2m: %v", id, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// joiner brings up a node the way a host joins: prepare readies what the
// bare host has before (a running containerd with the images, the tools'
// files), start is the join itself and returns once the agent runs.
type joiner interface {
	prepare(ctx context.Context, name string, bs *bootstrap) error
	start(ctx context.Context) error
	stop()
}

// joinResult is one node's join, each time from the join's start.
type joinResult struct {
	cert, ready, running time.Duration
	podStart             time.Duration // Ready → pod created → Running
	writes               int           // by the node, start → pod Running
}

// join joins -joins fresh nodes of t's kind, one after the other.
func (b *bench) join(ctx context.Context, t target, r *nodeResult) error {
	if t.joiner == nil {
		return errors.New("no joiner for this node")
	}
	b.bsOnce.Do(func() { b.bs, b.bsErr = prepareBootstrap(ctx, b.cluster) })
	if b.bsErr != nil {
		return fmt.Errorf("cluster side: %w", b.bsErr)
	}
	for i := range b.cfg.joins {
		if err := b.joinOnce(ctx, t, r, joinName(t.node, i)); err != nil {
			return fmt.Errorf("%s: %w", joinName(t.node, i), err)
		}
	}
	return nil
}

// joinOnce times a fresh node of t's kind: start → its client certificate
// is issued (the CSR as a watch sees it) → the Node is Ready → a pod
// created then is Running. Then the pod, the agent and the Node go.
func (b *bench) joinOnce(ctx context.Context, t target, r *nodeResult, name string) error {
	started := false
	// The agent goes first, then its Node (a running agent would write it
	// again).
	defer func() {
		t.joiner.stop()
		if started {
			b.deleteNode(name)
		}
	}()
	if err := t.joiner.prepare(ctx, name, b.bs); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	certSynced, certAt := watchFor(wctx, cache.NewListWatchFromClient(b.cs.CertificatesV1().RESTClient(), "certificatesigningrequests", "", fields.Everything()),
		&certificatesv1.CertificateSigningRequest{}, func(o runtime.Object) bool {
			csr, ok := o.(*certificatesv1.CertificateSigningRequest)
			return ok && len(csr.Status.Certificate) > 0 && csrCommonName(csr) == "system:node:"+name
		})
	readySynced, readyAt := watchFor(wctx, cache.NewListWatchFromClient(b.cs.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name)),
		&v1.Node{}, func(o runtime.Object) bool {
			n, ok := o.(*v1.Node)
			ready, _ := harness.NodeReady(n)
			return ok && ready
		})
	for _, s := range []<-chan struct{}{certSynced, readySynced} {
		select {
		case <-s:
		case <-wctx.Done():
			return fmt.Errorf("watches not synced: %w", wctx.Err())
		}
	}
	log.Infof("[%s] join as %s", t.label, name)
	t0 := time.Now()
	started = true
	if err := t.joiner.start(ctx); err != nil {
		return err
	}
	cert := <-certAt
	if cert.err != nil {
		return fmt.Errorf("client certificate: %w", cert.err)
	}
	log.Infof("[%s] client certificate of %s issued after %v", t.label, name, cert.at.Sub(t0).Round(time.Millisecond))
	ready := <-readyAt
	if ready.err != nil {
		return fmt.Errorf("node Ready: %w", ready.err)
	}
	scenario := "join-" + name
	pods := []*v1.Pod{sleeperPod(name, t.ns, scenario, 0)}
	tr, created, running, err := b.launch(ctx, t, scenario, pods, "running", map[string]cond{"running": harness.PodRunning}, 3*time.Minute)
	if err != nil {
		return err
	}
	defer tr.stop()
	res := &joinResult{cert: cert.at.Sub(t0), ready: ready.at.Sub(t0)}
	if at, ok := running[pods[0].Name]; ok {
		res.running, res.podStart = at.Sub(t0), at.Sub(created[pods[0].Name])
	}
	if res.writes, _, err = b.audit.writes(name, t0, time.Now()); err != nil {
		return err
	}
	log.Infof("[%s] joined: certificate %v, Ready %v, pod Running %v after the start", t.label,
		res.cert.Round(time.Millisecond), res.ready.Round(time.Millisecond), res.running.Round(time.Millisecond))
	r.joins = append(r.joins, *res)
	_, goneAt, err := b.remove(ctx, tr, pods, 2*time.Minute)
	// Named by the join's number, the same on both nodes (one row each).
	r.count(fmt.Sprintf("join %d: first pod", len(r.joins)), pods, running, goneAt)
	return err
}

// deleteNode removes the joined node's Node once its agent stopped.
func (b *bench) deleteNode(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		log.Warnf("delete node %s: %v", name, err)
	}
}

// csrCommonName is the subject CN a CSR asks for ("" if unreadable).
func csrCommonName(csr *certificatesv1.CertificateSigningRequest) string {
	blk, _ := pem.Decode(csr.Spec.Request)
	if blk == nil {
		return ""
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return ""
	}
	return req.Subject.CommonName
}

type seen struct {
	at  time.Time
	err error
}

// watchFor lists and watches lw's objects; synced closes once the initial
// list is in, met then gets the receive time of the first event whose
// object satisfies cond (or why none did before ctx ended).
func watchFor(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, cond func(runtime.Object) bool) (<-chan struct{}, <-chan seen) {
	synced, met := make(chan struct{}), make(chan seen, 1)
	var once sync.Once
	go func() {
		_, err := watchtools.UntilWithSync(ctx, lw, obj, func(cache.Store) (bool, error) {
			once.Do(func() { close(synced) })
			return false, nil
		}, func(ev watch.Event) (bool, error) {
			return ev.Type != watch.Deleted && cond(ev.Object), nil
		})
		met <- seen{time.Now(), err}
	}()
	return synced, met
}

// hostletJoiner joins with `hostlet join` (bootstrap token, CA pin) as the
// join e2e test does on the harness's containerd, then starts hostlet from
// the files join wrote, as the systemd unit would.
type hostletJoiner struct {
	c     *harness.Cluster
	bin   string
	name  string
	state string
	bs    *bootstrap
	h     *harness.Hostlet
}

func (j *hostletJoiner) prepare(_ context.Context, name string, bs *bootstrap) error {
	j.name, j.bs = name, bs
	j.state = filepath.Join(j.c.Dir(), "bench-join", name, "state")
	return os.MkdirAll(filepath.Dir(j.state), 0o755)
}

func (j *hostletJoiner) start(ctx context.Context) error {
	args := append([]string{"join", j.bs.server, "--token", j.bs.token, "--discovery-token-ca-cert-hash", j.bs.caHash},
		j.c.JoinArgs(j.state, j.name)...)
	// The bench's own kubelet runs on this host on purpose, beside it.
	args = append(args, "--tls-bootstrap-timeout", "2m", "--ignore-preflight-errors", "KubeletNotRunning")
	if out, err := exec.CommandContext(ctx, j.bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("hostlet join: %w\n%s", err, out)
	}
	var err error
	// The harness gives it the shared disk's eviction thresholds and image
	// GC (the imported images cannot be pulled again).
	j.h, err = j.c.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: j.bin, NodeName: j.name, NoWaitReady: true},
		filepath.Join(j.state, "config.yaml"))
	return err
}

func (j *hostletJoiner) stop() {
	if j.h != nil {
		j.h.Stop()
		j.h = nil
	}
}

// kubeletJoiner runs the upstream kubelet's TLS bootstrap: a
// --bootstrap-kubeconfig with the token, no client certificate, a
// self-signed serving certificate (its default). Its host has a CRI
// containerd of its own with the images (two kubelets on one CRI runtime
// would remove each other's pods), the kubelet's CNI config and a cgroup
// root of its own.
type kubeletJoiner struct {
	c          *harness.Cluster
	imgs       *benchImages
	cniConfDir string
	nodeIP     string
	crun       string // crun's binary, the default runtime; "": runc
	cri        *criRuntime
	p          *harness.Process
	dir        string
	args       []string
}

func (j *kubeletJoiner) prepare(ctx context.Context, name string, bs *bootstrap) error {
	j.dir = filepath.Join(j.c.Dir(), "bench-join", name)
	root := filepath.Join(j.dir, "root")
	for _, d := range []string{root, filepath.Join(j.dir, "pod-logs"), filepath.Join(j.dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if j.cri, err = startCRIContainerd(ctx, filepath.Join(j.dir, "containerd"), j.c.BinDir(),
		kubeletCRI(harness.CRIConfig{SandboxImage: pauseRef, CNIBinDir: j.c.CNIBinDir(), CNIConfDir: j.cniConfDir}, j.dir, j.crun)); err != nil {
		return err
	}
	for _, a := range append([]string{j.imgs.pause}, j.imgs.test...) {
		if err := j.cri.importImage(ctx, a); err != nil {
			return err
		}
	}
	if err := harness.RemoveCgroupRoot(joinCgroupRoot); err != nil {
		return err
	}
	if err := harness.MakeCgroupRoot(joinCgroupRoot); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cfg := harness.KubeletConfigYAML(harness.KubeletConfig{
		Address: "127.0.0.1", Port: port, ClientCA: j.c.CACertFile(),
		CgroupRoot: joinCgroupRoot, CRISocket: j.cri.socket(),
		PodLogsDir: filepath.Join(j.dir, "pod-logs"), VolumePluginDir: filepath.Join(j.dir, "volume-plugins"),
	})
	cfgPath := filepath.Join(j.dir, "kubelet-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	bootstrapKubeconfig := filepath.Join(j.dir, "bootstrap-kubelet.conf")
	if err := os.WriteFile(bootstrapKubeconfig, []byte(bootstrapKubeconfigYAML(bs)), 0o600); err != nil {
		return err
	}
	j.args = []string{
		"--config", cfgPath,
		"--bootstrap-kubeconfig", bootstrapKubeconfig,
		"--kubeconfig", filepath.Join(j.dir, "kubelet.conf"),
		"--hostname-override", name,
		"--node-ip", j.nodeIP,
		"--root-dir", root,
		"--cert-dir", filepath.Join(root, "pki"),
	}
	return nil
}

// bootstrapKubeconfigYAML is the kubelet's --bootstrap-kubeconfig, as
// kubeadm join writes it: the server, its CA and the token.
func bootstrapKubeconfigYAML(bs *bootstrap) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: tls-bootstrap-token-user
  user:
    token: %s
contexts:
- name: bootstrap
  context:
    cluster: cluster
    user: tls-bootstrap-token-user
current-context: bootstrap
`, bs.server, bs.caFile, bs.token)
}

func (j *kubeletJoiner) start(context.Context) error {
	env := append(os.Environ(), "PATH="+j.c.BinDir()+":"+os.Getenv("PATH"))
	var err error
	j.p, err = harness.StartProcess("kubelet-join", filepath.Join(j.dir, "kubelet.log"), env, filepath.Join(j.c.BinDir(), "kubelet"), j.args...)
	return err
}

func (j *kubeletJoiner) stop() {
	if j.p != nil {
		j.p.Stop(15 * time.Second)
		j.p = nil
	}
	if j.cri != nil {
		j.cri.stop()
		j.cri = nil
	}
	if err := harness.RemoveCgroupRoot(joinCgroupRoot); err != nil {
		log.Warnf("remove %s: %v", joinCgroupRoot, err)
	}
}
