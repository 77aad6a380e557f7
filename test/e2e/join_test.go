package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// joinedNode is the node the join test adds with `hostlet join`.
const joinedNode = "hostlet-joined"

// A host with an empty state dir joins with the command the chart's NOTES
// print, after wrong credentials, an unreachable server and a taken name
// were each refused without writing anything; join writes the cluster's DNS
// (the kube-dns Service's IP the chart published; kubeadm's kubelet-config
// before it, a flag before both) into hostlet's config; hostlet then runs
// from what join wrote under a CSR-issued identity and runs pods, whose
// resolv.conf names that DNS; `hostlet leave`
// drains it as a PodDisruptionBudget allows and removes the Node and the
// files; `helm uninstall` removes what the chart created.
func TestJoinAndLeave(t *testing.T) {
	skipIfNoCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := harness.BuildHostlet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := cluster.Client()

	// The cluster's DNS Service, at CoreDNS's address (no pods behind it:
	// only its IP matters here); the chart publishes it for join.
	kubeDNSService(ctx, t)

	// The cluster side, as a user installs it.
	chart := installChart(ctx, t, "hostlet", "--set", "clusterInfo.server="+cluster.APIServerURL())
	notes := chart.notes
	server, token := chart.joinCommand(t, "")
	hashCmd := regexp.MustCompile(`(?s)CA_HASH=(sha256:\$\(.*?\| cut -d' ' -f1\))`).FindStringSubmatch(notes)
	if hashCmd == nil {
		t.Fatalf("NOTES print no CA hash one-liner:\n%s", notes)
	}
	sh := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; echo "+hashCmd[1])
	sh.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath(), "PATH="+cluster.BinDir()+":"+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	caHash := strings.TrimSpace(string(out))
	if err != nil || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(caHash) {
		t.Fatalf("NOTES' CA hash one-liner: %v: %q", err, out)
	}
	if want := caHashOf(t, cluster.CACertFile()); caHash != want {
		t.Fatalf("NOTES' one-liner computes %s, the cluster CA's pin is %s", caHash, want)
	}
	t.Logf("NOTES: hostlet join %s --token %s --discovery-token-ca-cert-hash %s", server, token, caHash)

	// An upgrade keeps the generated token and cluster-info with its signature.
	upgraded, err := cluster.Helm(ctx, chart.helm, "upgrade", chart.release, chart.dir,
		"--namespace", "kube-system", "--set", "clusterInfo.server="+cluster.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(upgraded, " --token "+token+" ") {
		t.Fatalf("helm upgrade changed the token:\n%s", upgraded)
	}

	state := filepath.Join(t.TempDir(), "state")
	join := func(name, server, token, hash string, extra ...string) (string, error) {
		return hostletJoin(ctx, bin, state, name, server, token, hash, append([]string{"--discovery-timeout", "10s", "--hostlet-arg", "v=4"}, extra...)...)
	}
	stateEmpty := func(t *testing.T) {
		t.Helper()
		if entries, err := os.ReadDir(state); err == nil {
			t.Fatalf("the refused join wrote %d entries into the state dir", len(entries))
		}
	}

	id, _, _ := strings.Cut(token, ".")
	for _, c := range []struct {
		name, server, token, hash, node, want string
	}{
		{"wrong CA hash", server, token, "sha256:" + strings.Repeat("ab", 32), joinedNode, "matches no --discovery-token-ca-cert-hash"},
		{"wrong secret", server, id + ".0000000000000000", caHash, joinedNode, "does not verify with this token's secret"},
		{"unknown token", server, "zzzzzz.0000000000000000", caHash, joinedNode, `token "zzzzzz" is not valid for this cluster or has expired`},
		{"unreachable server", "https://127.0.0.1:" + closedPort(t), token, caHash, joinedNode, "connection refused"},
		{"name of a Ready node", server, token, caHash, nodeName, "a Ready node named \"" + nodeName + "\" already exists"},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			out, err := join(c.node, c.server, c.token, c.hash)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("want a failure saying %q, got %v:\n%s", c.want, err, out)
			}
			stateEmpty(t)
		})
	}
	t.Run("dry run", func(t *testing.T) {
		out, err := join(joinedNode, server, token, caHash, "--dry-run")
		if err != nil || !strings.Contains(out, "[dry-run] would request a client certificate for system:node:"+joinedNode) ||
			!strings.Contains(out, "kind: KubeletConfiguration") || !strings.Contains(out, "--hostname-override="+joinedNode) {
			t.Fatalf("dry run: %v:\n%s", err, out)
		}
		stateEmpty(t)
	})

	out2, err := join(joinedNode, server, token, caHash)
	if err != nil {
		t.Fatalf("hostlet join: %v\n%s", err, out2)
	}
	t.Logf("hostlet join:\n%s", out2)
	// No DNS flags: the cluster's DNS Service IP, through the chart.
	wantDNS(t, state, harness.ClusterDNS, harness.ClusterDomain)
	if !strings.Contains(out2, "from=kube-system/hostlet-kubelet-config") || strings.Contains(out2, "no cluster DNS") {
		t.Errorf("join does not say where the cluster DNS came from:\n%s", out2)
	}
	pair := filepath.Join(state, "pki", "hostlet-client-current.pem")
	// hostlet's flags besides the KubeletConfiguration, as the unit passes
	// them: the node's identity and root dir, and --hostlet-arg's.
	if flags, err := os.ReadFile(filepath.Join(state, "hostlet-flags.env")); err != nil ||
		!strings.Contains(string(flags), "--hostname-override="+joinedNode+" ") || !strings.Contains(string(flags), "--v=4") {
		t.Errorf("hostlet-flags.env: %v\n%s", err, flags)
	}
	for _, f := range []string{filepath.Join(state, "kubeconfig"), pair, filepath.Join(state, "pki", "hostlet.key"), filepath.Join(state, "config.yaml")} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	cert := certOf(t, pair)
	if cert.Subject.CommonName != "system:node:"+joinedNode || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Fatalf("client certificate is for %v", cert.Subject)
	}
	if err := cert.CheckSignatureFrom(certOf(t, cluster.CACertFile())); err != nil {
		t.Fatalf("client certificate is not the cluster CA's: %v", err)
	}
	csrs, err := client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issued := false
	for _, c := range csrs.Items {
		if c.Spec.Username == "system:bootstrap:"+id && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && bytes.Contains(c.Status.Certificate, pemBody(t, pair)) {
			issued = true
		}
	}
	if !issued {
		t.Fatal("no CSR of the bootstrap token issued the node's certificate")
	}

	t.Run("rerun keeps the identity", func(t *testing.T) {
		before, _ := os.ReadFile(pair)
		// kubeadm's kubelet-config comes before the chart's, a flag before
		// both; the token reads it through the chart's Role.
		kubeadm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubelet-config"},
			Data: map[string]string{"kubelet": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.20\nclusterDomain: kubeadm.local\n"}}
		if _, err := client.CoreV1().ConfigMaps("kube-system").Create(ctx, kubeadm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), kubeadm.Name, metav1.DeleteOptions{})
		if out, err := join(joinedNode, server, token, caHash); err != nil {
			t.Fatalf("rerun: %v\n%s", err, out)
		}
		wantDNS(t, state, "10.96.0.20", "kubeadm.local")
		if out, err := join(joinedNode, server, token, caHash, "--cluster-dns", "10.96.0.30"); err != nil {
			t.Fatalf("rerun with --cluster-dns: %v\n%s", err, out)
		}
		wantDNS(t, state, "10.96.0.30", "kubeadm.local")
		if err := client.CoreV1().ConfigMaps("kube-system").Delete(ctx, kubeadm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := join(joinedNode, server, token, caHash); err != nil {
			t.Fatalf("rerun: %v\n%s", err, out)
		}
		wantDNS(t, state, harness.ClusterDNS, harness.ClusterDomain)
		if after, _ := os.ReadFile(pair); !bytes.Equal(before, after) {
			t.Fatal("a rerun replaced a valid client certificate")
		}
	})

	h, err := cluster.StartJoinedHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: joinedNode}, filepath.Join(state, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	// A ClusterFirst pod's resolv.conf names the cluster's DNS. It comes
	// back as the termination message: the API server cannot fetch logs
	// from a joined node (its self-signed serving certificate has no IP).
	pod := busybox(ns, "on-joined", "sh", "-c", "cat /etc/resolv.conf > /dev/termination-log")
	pod.Spec.NodeName = joinedNode
	cluster.CreatePod(t, pod)
	ended := waitPhase(t, ns, "on-joined", v1.PodSucceeded)
	var resolv string
	if st := ended.Status.ContainerStatuses; len(st) == 1 && st[0].State.Terminated != nil {
		resolv = st[0].State.Terminated.Message
	}
	if !strings.Contains(resolv, "nameserver "+harness.ClusterDNS+"\n") ||
		!strings.Contains(resolv, "search "+ns+".svc."+harness.ClusterDomain+" svc."+harness.ClusterDomain+" "+harness.ClusterDomain) {
		t.Fatalf("resolv.conf of a pod on the joined node:\n%s", resolv)
	}

	t.Run("client certificate rotation", func(t *testing.T) {
		// An aging certificate in place of the issued one: hostlet renews it
		// at start through a selfnodeclient CSR, switches to the new one
		// without a restart, and the node keeps renewing its Lease.
		certPEM, keyPEM, err := cluster.AgingNodeClientCert(joinedNode)
		if err != nil {
			t.Fatal(err)
		}
		aging := restartWithPair(ctx, t, h, pair, certPEM, keyPEM)
		pid := h.Pid()
		pollUntil(t, 4*time.Minute, "the client certificate to be renewed", func() bool {
			return certOf(t, pair).SerialNumber.Cmp(aging.SerialNumber) != 0
		})
		renewed := certOf(t, pair)
		if renewed.Subject.CommonName != "system:node:"+joinedNode || !renewed.NotAfter.After(aging.NotAfter) {
			t.Fatalf("renewed certificate: %v until %v", renewed.Subject, renewed.NotAfter)
		}
		csrs, err := client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range csrs.Items {
			if c.Spec.Username == "system:node:"+joinedNode && bytes.Contains(c.Status.Certificate, pemBody(t, pair)) {
				found = true
			}
		}
		if !found {
			t.Fatal("no CSR of the node itself issued the renewed certificate")
		}
		pollUntil(t, time.Minute, "hostlet to reconnect with the renewed certificate", func() bool {
			b, _ := os.ReadFile(h.LogPath())
			return bytes.Contains(b, []byte("client certificate rotated"))
		})
		rotated := time.Now()
		pollUntil(t, time.Minute, "a Lease renewal after the rotation", func() bool {
			l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, joinedNode, metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(rotated)
		})
		if h.Pid() != pid || h.Exited() {
			t.Fatal("hostlet restarted to rotate")
		}
		if err := cluster.WaitNodeReady(ctx, joinedNode); err != nil {
			t.Fatal(err)
		}
	})

	// Two replicas on the joined node under a budget of one disruption:
	// leave's second eviction waits for the first pod's replacement, which
	// the scheduler puts on the other node of the pool.
	const pool = "hostlet.test/join-pool"
	labelNode(t, joinedNode, pool, "drain")
	labelNode(t, nodeName, pool, "")
	t.Cleanup(func() { unlabelNode(nodeName, pool) })
	sel := map[string]string{"app": "drained"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drained"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr[int32](2), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: ptr[int64](1),
					NodeSelector:                  map[string]string{pool: "drain"},
					Containers:                    []v1.Container{{Name: "c", Image: images.BusyboxRef, Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	if _, err := client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drained"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, sel, 2, joinedNode)
	// The other node may take replacements only now.
	labelNode(t, nodeName, pool, "drain")
	pollUntil(t, time.Minute, "the budget to allow one disruption", func() bool {
		p, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "drained", metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed == 1
	})

	// A DaemonSet's pod, which a drain leaves running: leave's cleanup
	// of the host stops and removes it once hostlet is stopped.
	dsLabels := map[string]string{"app": "kept"}
	ds := nodeDaemonSet(ns, "kept", joinedNode, dsLabels, v1.PodSpec{TerminationGracePeriodSeconds: ptr[int64](1),
		Containers: []v1.Container{{Name: "c", Image: images.BusyboxRef, Command: []string{"sleep", "3600"}}}})
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, dsLabels, 1, joinedNode)
	dsPods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kept"})
	if err != nil || len(dsPods.Items) != 1 {
		t.Fatalf("the DaemonSet's pods: %v, %v", err, dsPods)
	}

	pid := h.Pid()
	// The flags the harness gave hostlet besides join's config file.
	leave := exec.CommandContext(ctx, bin, "leave", "--state-dir", state, "--skip-systemd", "--timeout", "3m",
		"--hostlet-arg", "pod-logs-dir="+h.PodLogsDir(), "--hostlet-arg", "container-logs-dir="+h.ContainerLogsDir(),
		"--hostlet-arg", "cgroup-root="+h.CgroupRoot(), "--logind-conf-dir", t.TempDir(),
		"--stop-command", fmt.Sprintf("kill -TERM %d; while kill -0 %d 2>/dev/null; do sleep 0.2; done", pid, pid))
	out3, err := leave.CombinedOutput()
	if err != nil {
		t.Fatalf("hostlet leave: %v\n%s", err, out3)
	}
	t.Logf("hostlet leave:\n%s", out3)
	if !strings.Contains(string(out3), "eviction refused for now") {
		t.Error("leave never waited for the budget (no 429 seen)")
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, joinedNode, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Node %s still there after leave: %v", joinedNode, err)
	}
	waitRunning(t, ns, sel, 2, nodeName)
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(state)
		t.Fatalf("leave left the state dir: %v %v", err, entries)
	}
	// Nothing of the node's pods is left on the host: not of the pod that
	// ended before hostlet restarted (the rotation's restart) and that the
	// drain deleted, not of the DaemonSet's, still running at the stop.
	for _, uid := range []string{string(ended.UID), string(dsPods.Items[0].UID)} {
		ctrs, err := cluster.ContainerdClient().Containers(ctx, fmt.Sprintf("labels.%q==%s", "io.kubernetes.pod.uid", uid))
		if err != nil || len(ctrs) != 0 {
			t.Errorf("containers of pod %s after leave: %d, %v", uid, len(ctrs), err)
		}
	}
	for _, d := range []string{filepath.Join(h.RootDir(), "pods"), h.PodLogsDir(), h.ContainerLogsDir()} {
		if entries, err := os.ReadDir(d); len(entries) != 0 || (err != nil && !os.IsNotExist(err)) {
			t.Errorf("leave left %s: %v %v", d, entries, err)
		}
	}
	mounts, err := harness.CgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, h.CgroupRoot(), "kubepods")); !os.IsNotExist(err) {
			t.Errorf("leave left the kubepods cgroup in %s: %v", m, err)
		}
	}

	if err := chart.uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("bootstrap token Secret after uninstall: %v", err)
	}
	if _, err := client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster-info after uninstall: %v", err)
	}
	crbs, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=hostlet"})
	if err != nil || len(crbs.Items) != 0 {
		t.Errorf("ClusterRoleBindings of the release after uninstall: %v %d", err, len(crbs.Items))
	}
}

// kubeDNSService makes kube-system/kube-dns at harness.ClusterDNS, as
// CoreDNS's Service, unless there is one; it is removed at cleanup.
func kubeDNSService(ctx context.Context, t *testing.T) {
	t.Helper()
	svcs := cluster.Client().CoreV1().Services("kube-system")
	if _, err := svcs.Get(ctx, "kube-dns", metav1.GetOptions{}); err == nil {
		t.Fatal("kube-system/kube-dns exists already: this test needs to know its IP")
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: v1.ServiceSpec{ClusterIP: harness.ClusterDNS, Selector: map[string]string{"k8s-app": "kube-dns"},
			Ports: []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP}}},
	}
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svcs.Delete(context.Background(), "kube-dns", metav1.DeleteOptions{}) })
}

// wantDNS checks the cluster DNS settings in the config join wrote.
func wantDNS(t *testing.T, state, server, domain string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// A KubeletConfiguration, as kubeadm's config.yaml.
	var conf struct {
		Kind   string   `json:"kind"`
		DNS    []string `json:"clusterDNS"`
		Domain string   `json:"clusterDomain"`
	}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Kind != "KubeletConfiguration" || len(conf.DNS) != 1 || conf.DNS[0] != server || conf.Domain != domain {
		t.Fatalf("join wrote a %s with clusterDNS %v, clusterDomain %q; want a KubeletConfiguration with [%s] and %q:\n%s", conf.Kind, conf.DNS, conf.Domain, server, domain, b)
	}
}

// chartRelease is the cluster side of `hostlet join`: charts/hostlet
// installed with helm into kube-system, as a user installs it.
type chartRelease struct {
	helm, dir, release string
	// notes are what the install printed: the join command.
	notes       string
	uninstalled bool
}

// installChart installs the chart as release with the extra helm args; it
// is uninstalled at cleanup unless the test did so itself.
func installChart(ctx context.Context, t *testing.T, release string, args ...string) *chartRelease {
	t.Helper()
	helm, err := harness.BuildHelm(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	r := &chartRelease{helm: helm, dir: filepath.Join(root, "charts", "hostlet"), release: release}
	r.notes, err = cluster.Helm(ctx, helm, append([]string{"install", release, r.dir, "--namespace", "kube-system"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !r.uninstalled {
			_ = r.uninstall(context.Background())
		}
	})
	return r
}

func (r *chartRelease) uninstall(ctx context.Context) error {
	_, err := cluster.Helm(ctx, r.helm, "uninstall", r.release, "--namespace", "kube-system", "--wait")
	if err == nil {
		r.uninstalled = true
	}
	return err
}

// joinCommand is the server and token of the join command the notes
// print, the one whose line goes on with tail after the CA hash.
func (r *chartRelease) joinCommand(t *testing.T, tail string) (server, token string) {
	t.Helper()
	m := regexp.MustCompile(`hostlet join (https://\S+) --token (\S+) --discovery-token-ca-cert-hash \$CA_HASH` + regexp.QuoteMeta(tail)).FindStringSubmatch(r.notes)
	if m == nil {
		t.Fatalf("NOTES print no join command ending %q:\n%s", tail, r.notes)
	}
	return m[1], m[2]
}

// hostletJoin runs `hostlet join` on this host for node name, its state in
// state, as the host's admin runs it.
func hostletJoin(ctx context.Context, bin, state, name, server, token, hash string, extra ...string) (string, error) {
	args := append([]string{"join", server, "--token", token, "--discovery-token-ca-cert-hash", hash}, cluster.JoinArgs(state, name)...)
	args = append(append(args, "--tls-bootstrap-timeout", "2m"), extra...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

func caHashOf(t *testing.T, file string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", "openssl x509 -noout -pubkey -in "+file+" | openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1").Output()
	if err != nil {
		t.Fatal(err)
	}
	return "sha256:" + strings.TrimSpace(string(out))
}

func certOf(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			t.Fatalf("no certificate in %s", file)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// pemBody is the certificate block of a cert+key file, as PEM.
func pemBody(t *testing.T, file string) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certOf(t, file).Raw})
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

func labelNode(t *testing.T, node, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := cluster.Client().CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func unlabelNode(node, key string) {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, key)
	cluster.Client().CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
}

// waitRunning waits for want Running and Ready pods of sel, all on node.
func waitRunning(t *testing.T, ns string, sel map[string]string, want int, node string) {
	t.Helper()
	pollUntil(t, 2*time.Minute, fmt.Sprintf("%d ready pods %v on %s", want, sel, node), func() bool {
		pods, err := cluster.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: sel})})
		if err != nil {
			return false
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.NodeName != node || p.Status.Phase != v1.PodRunning {
				return false
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
					n++
				}
			}
		}
		return n == want
	})
}
