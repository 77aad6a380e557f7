package e2e

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

// countingRegistry is a loopback registry behind a proxy that records the
// requests it forwards: the nodes pull through the proxy's address, the
// test pushes to the registry's own.
type countingRegistry struct {
	reg   *images.Registry
	proxy *http.Server
	addr  string

	mu   sync.Mutex
	seen []string // "METHOD path"
}

func startCountingRegistry(t *testing.T) *countingRegistry {
	t.Helper()
	reg, err := images.StartRegistry("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &countingRegistry{reg: reg, addr: ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Addr()})
	c.proxy = &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.seen = append(c.seen, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go c.proxy.Serve(ln)
	t.Cleanup(func() { c.proxy.Close() })
	if err := cluster.AllowInsecureRegistry(c.addr); err != nil {
		t.Fatal(err)
	}
	return c
}

// contentRequests are the requests for content by digest (blobs, and
// manifests by digest) so far; the tag's resolution is not one.
func (c *countingRegistry) contentRequests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.seen {
		if strings.Contains(s, "/blobs/") || strings.Contains(s, "/manifests/sha256:") {
			out = append(out, s)
		}
	}
	return out
}

// fakePeer makes a Node that is no hostlet: at the NodeIP and port given,
// as a node's kubelet advertises them. Deleted with the test.
func fakePeer(t *testing.T, name string, port int) {
	t.Helper()
	ctx := ctxT(t)
	nodes := cluster.Client().CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The controllers write the new Node too (taints, CIDRs).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: cluster.NodeIP()}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// corruptPeer serves, as node name with a serving certificate of the
// cluster's, every blob and manifest the registry has with its bytes
// flipped (the right length, the wrong content); it returns its port and
// how many requests it answered.
func corruptPeer(t *testing.T, name, registry string) (int, *atomic.Int32) {
	t.Helper()
	certFile, keyFile, err := cluster.KubeletServingCert(name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	ln, err := tls.Listen("tcp", net.JoinHostPort(cluster.NodeIP(), "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get("http://" + registry + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			http.NotFound(w, r)
			return
		}
		served.Add(1)
		for i := range b {
			b[i] ^= 0xff
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, &served
}

// The node-local registry mirror (--registry-mirror): two hostlet nodes,
// each with a containerd of its own, and two Nodes that are no hostlets:
// one that serves corrupt content, one whose port is closed. The first
// node pulls an image from the registry (the peers have none of it that
// is right: the corrupt one and the closed one are skipped); the second
// pulls it from the first: the registry resolves its tag and serves no
// content to it. The mirror serves content by digest only, to nodes only.
func TestRegistryMirror(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	reg := startCountingRegistry(t)
	if _, err := reg.reg.Push(ctx, localImage(t, images.BusyboxRef), "mirror/busybox:1.0"); err != nil {
		t.Fatal(err)
	}
	ref := reg.addr + "/mirror/busybox:1.0"

	badPort, badServed := corruptPeer(t, "mirror-corrupt", reg.reg.Addr())
	fakePeer(t, "mirror-corrupt", badPort)
	down, err := net.Listen("tcp", net.JoinHostPort(cluster.NodeIP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	downPort := down.Addr().(*net.TCPAddr).Port
	down.Close()
	fakePeer(t, "mirror-down", downPort)

	mirrorPeersRBAC(t)
	nodes := map[string]*harness.Hostlet{}
	for _, name := range []string{"hostlet-mirror-a", "hostlet-mirror-b"} {
		d, err := cluster.AddContainerd(ctx, name, harness.CRIConfig{SandboxImage: "registry.k8s.io/pause:3.10"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		nodes[name] = extraNode(t, harness.HostletOptions{NodeName: name,
			ExtraArgs: []string{"--container-runtime-endpoint", "unix://" + d.Socket(), "--registry-mirror"}})
	}

	ns := cluster.NewNamespace(t)
	run := func(node string) {
		t.Helper()
		pod := imagePod(ns, node, ref, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(0))
		cluster.CreatePod(t, pod)
		p, err := cluster.WaitForPod(ctxT(t), ns, pod.Name, 2*time.Minute, harness.PodReady)
		if err != nil {
			t.Fatalf("pod on %s never Ready: %v (log %s)", node, err, nodes[node].LogPath())
		}
		if msg := waitEvent(t, ns, pod.Name, "Pulled"); !strings.HasPrefix(msg, "Successfully pulled image") {
			t.Errorf("pod on %s: Pulled event %q", node, msg)
		}
		t.Logf("pod on %s: %s", node, p.Status.ContainerStatuses[0].ImageID)
	}

	run("hostlet-mirror-a")
	fromRegistry := reg.contentRequests()
	if len(fromRegistry) == 0 {
		t.Fatalf("the first node's pull asked the registry for no content: %v", reg.seen)
	}
	// The first node asked every peer for the first blob it fetched: the
	// corrupt one answered, and was skipped (the pod runs the image).
	if badServed.Load() == 0 {
		t.Errorf("the corrupt peer was never asked")
	}
	t.Logf("first node: %d content requests to the registry, %d corrupt answers", len(fromRegistry), badServed.Load())

	run("hostlet-mirror-b")
	if all := reg.contentRequests(); len(all) != len(fromRegistry) {
		t.Errorf("the second node's pull asked the registry for content: %v", all[len(fromRegistry):])
	}
	t.Logf("second node: %d corrupt answers in all", badServed.Load())
	// The nodes count where their content came from.
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	for node, want := range map[string]string{"hostlet-mirror-a": "registry", "hostlet-mirror-b": "peer"} {
		fams := scrapeAt(t, nodes[node].Port(), "/metrics", metricsToken)
		for _, source := range []string{"peer", "registry"} {
			v, _ := sample(fams, "hostlet_registry_mirror_fetched_bytes_total", map[string]string{"source": source})
			if (source == want) != (v > 0) {
				t.Errorf("%s: hostlet_registry_mirror_fetched_bytes_total{source=%s} = %v", node, source, v)
			}
		}
	}

	t.Run("served by digest, to nodes only", func(t *testing.T) {
		a := nodes["hostlet-mirror-a"]
		base := fmt.Sprintf("https://%s/v2/mirror/busybox/", net.JoinHostPort(cluster.NodeIP(), strconv.Itoa(a.Port())))
		var manifest string
		for _, s := range fromRegistry {
			if i := strings.Index(s, "/manifests/sha256:"); i > 0 {
				manifest = s[i+len("/manifests/"):]
			}
		}
		if manifest == "" {
			// The registry answered the tag's GET with the manifest: its
			// digest is the image's.
			p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "hostlet-mirror-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, manifest, _ = strings.Cut(p.Status.ContainerStatuses[0].ImageID, "@")
		}
		get := func(c *http.Client, path string) int {
			t.Helper()
			resp, err := c.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		node, admin := clientFor(t, "mirror-probe", true), clientFor(t, "", false)
		if got := get(node, "manifests/"+manifest); got != http.StatusOK {
			t.Errorf("a node asking for the manifest by digest: %d", got)
		}
		if got := get(node, "manifests/1.0"); got != http.StatusNotFound {
			t.Errorf("a node asking for the tag: %d, want 404", got)
		}
		if got := get(admin, "manifests/"+manifest); got != http.StatusForbidden {
			t.Errorf("a cluster admin (no node) asking for the manifest: %d, want 403", got)
		}
	})
}

// mirrorPeersRBAC lets nodes list and watch all Nodes, as the chart's
// rbac.registryMirror does (the Node authorizer allows a node only its own).
func mirrorPeersRBAC(t *testing.T) {
	grantNodes(t, "e2e:registry-mirror-peers", "nodes")
}

// grantNodes lets every node list and watch resource (of the core group)
// until the test ends, as a chart value's ClusterRole and binding do.
func grantNodes(t *testing.T, name, resource string) {
	t.Helper()
	ctx := ctxT(t)
	rbac := cluster.Client().RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// clientFor is an HTTPS client with a client certificate of the cluster's:
// node name's (a kubeconfig the harness makes for it), or with node false
// the test's own (an admin's); the cluster CA as roots.
func clientFor(t *testing.T, name string, node bool) *http.Client {
	t.Helper()
	var cfg *rest.Config
	var err error
	if node {
		var kc string
		if kc, err = cluster.NodeKubeconfig(name); err == nil {
			cfg, err = clientcmd.BuildConfigFromFlags("", kc)
		}
	} else {
		cfg = rest.CopyConfig(cluster.RESTConfig())
	}
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.ServerName = ""
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
}

// Three hostlet nodes with the registry mirror pull one image at the same
// moment: each blob of it (its layers and config) is fetched from the
// registry once, by the node that owns it in its rendezvous order; the
// others stream it from that node, as it arrives or once it has it. The
// image is the test's own (busybox and a layer of 32 MiB of seeded random
// bytes), so no node has any of it.
func TestRegistryMirrorPullsAtOnce(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	reg := startCountingRegistry(t)
	data := make([]byte, 32<<20)
	rnd := rand.New(rand.NewChaCha8([32]byte{'h', 'o', 's', 't', 'l', 'e', 't'}))
	for i := 0; i < len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rnd.Uint64())
	}
	img, err := images.BuildBusyboxWith(ctx, t.TempDir(), "mirror/atonce:1.0", map[string][]byte{"data/random": data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.reg.Push(ctx, img, "mirror/atonce:1.0"); err != nil {
		t.Fatal(err)
	}
	ref := reg.addr + "/mirror/atonce:1.0"
	blobs := manifestBlobs(t, reg.reg.Addr(), "mirror/atonce", "1.0")

	mirrorPeersRBAC(t)
	names := []string{"hostlet-atonce-a", "hostlet-atonce-b", "hostlet-atonce-c"}
	nodes := map[string]*harness.Hostlet{}
	for _, name := range names {
		d, err := cluster.AddContainerd(ctx, name, harness.CRIConfig{SandboxImage: "registry.k8s.io/pause:3.10"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		nodes[name] = extraNode(t, harness.HostletOptions{NodeName: name,
			ExtraArgs: []string{"--container-runtime-endpoint", "unix://" + d.Socket(), "--registry-mirror", "-v", "4"}})
	}

	ns := cluster.NewNamespace(t)
	for _, node := range names {
		pod := imagePod(ns, node, ref, v1.PullIfNotPresent)
		pod.Spec.NodeName = node
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(0))
		cluster.CreatePod(t, pod)
	}
	for _, node := range names {
		if _, err := cluster.WaitForPod(ctx, ns, node, 2*time.Minute, harness.PodReady); err != nil {
			t.Fatalf("pod on %s never Ready: %v (log %s)", node, err, nodes[node].LogPath())
		}
	}
	for _, b := range blobs {
		st := reg.reg.Blob(b.digest)
		t.Logf("%s %s (%d bytes): %d fetches from the registry, %d bytes", b.kind, b.digest, b.size, len(st.Requests), st.Bytes)
		if len(st.Requests) != 1 {
			t.Errorf("the %s %s was fetched from the registry %d times, want once", b.kind, b.digest, len(st.Requests))
		}
	}
	_, metricsToken := kubeletIdentity(t, ns, "metrics", "get")
	for _, node := range names {
		fams := scrapeAt(t, nodes[node].Port(), "/metrics", metricsToken)
		peer, _ := sample(fams, "hostlet_registry_mirror_fetched_bytes_total", map[string]string{"source": "peer"})
		reg, _ := sample(fams, "hostlet_registry_mirror_fetched_bytes_total", map[string]string{"source": "registry"})
		t.Logf("%s: %.0f bytes from peers, %.0f from the registry", node, peer, reg)
	}
}

type imageBlob struct {
	kind, digest string
	size         int64
}

// manifestBlobs are the config and layers of repo:tag, from the registry
// at addr (not the counting proxy).
func manifestBlobs(t *testing.T, addr, repo, tag string) []imageBlob {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, "http://"+addr+"/v2/"+repo+"/manifests/"+tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Config struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"config"`
		Layers []struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Layers) == 0 {
		t.Fatalf("manifest of %s:%s: %v (%d layers)", repo, tag, err, len(m.Layers))
	}
	out := []imageBlob{{"config", m.Config.Digest, m.Config.Size}}
	for _, l := range m.Layers {
		out = append(out, imageBlob{"layer", l.Digest, l.Size})
	}
	return out
}
