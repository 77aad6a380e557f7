package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	"golang.org/x/sys/unix"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// nodeSupportsRRO is what the node says of its default handler.
func nodeSupportsRRO(t *testing.T) bool {
	t.Helper()
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range n.Status.RuntimeHandlers {
		if h.Name == "" && h.Features != nil && h.Features.RecursiveReadOnlyMounts != nil {
			return *h.Features.RecursiveReadOnlyMounts
		}
	}
	t.Fatalf("node reports no default runtime handler: %+v", n.Status.RuntimeHandlers)
	return false
}

// A read-only hostPath volume with a tmpfs mounted below it: recursive
// read-only makes the submount read-only too where the runtime and kernel
// can (runc's rro), a plain read-only mount leaves it writable (the
// kubelet's IfPossible fallback); Enabled where they cannot is the
// kubelet's CreateContainerConfigError.
func TestPodFieldsRecursiveReadOnly(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })

	supported := nodeSupportsRRO(t)
	t.Logf("node reports recursive read-only mounts: %v", supported)
	mk := func(name string, mode v1.RecursiveReadOnlyMode) *v1.Pod {
		pod := busybox(ns, name, "sh", "-c", "touch /mnt/top 2>&1; touch /mnt/sub/x 2>&1; echo done")
		pod.Spec.Volumes = []v1.Volume{{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/mnt", ReadOnly: true, RecursiveReadOnly: &mode}}
		return pod
	}
	// recursiveReadOnly of the one mount as the container status has it.
	statusMode := func(p *v1.Pod) v1.RecursiveReadOnlyMode {
		t.Helper()
		if len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("container statuses: %+v", p.Status.ContainerStatuses)
		}
		var vm v1.VolumeMountStatus
		for _, m := range p.Status.ContainerStatuses[0].VolumeMounts {
			if m.Name == "host" {
				vm = m
			}
		}
		if vm.Name != "host" || vm.MountPath != "/mnt" || !vm.ReadOnly || vm.RecursiveReadOnly == nil {
			t.Fatalf("volumeMount status %+v", vm)
		}
		return *vm.RecursiveReadOnly
	}

	out := runOutput(t, mk("ifpossible", v1.RecursiveReadOnlyIfPossible))
	if n := strings.Count(out, "Read-only file system"); !strings.Contains(out, "done") || (supported && n != 2) || (!supported && n != 1) {
		t.Fatalf("IfPossible (rro %v): %q", supported, out)
	}
	p, _ := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), "ifpossible", metav1.GetOptions{})
	want := v1.RecursiveReadOnlyDisabled
	if supported {
		want = v1.RecursiveReadOnlyEnabled
	}
	if got := statusMode(p); got != want {
		t.Errorf("IfPossible: status recursiveReadOnly %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(sub, "x")); supported == (err == nil) {
		t.Errorf("the submount written: %v (rro %v)", err == nil, supported)
	}

	if supported {
		out := runOutput(t, mk("enabled", v1.RecursiveReadOnlyEnabled))
		if strings.Count(out, "Read-only file system") != 2 {
			t.Fatalf("Enabled: %q", out)
		}
	} else {
		cluster.CreatePod(t, mk("enabled", v1.RecursiveReadOnlyEnabled))
		p := waitFor(t, ns, "enabled", time.Minute, "config error", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; msg != `failed to resolve recursive read-only mode: volume "host" requested recursive read-only mode, but it is not supported by the runtime` {
			t.Errorf("message %q", msg)
		}
	}

	// Not read-only: refused whatever the runtime.
	pod := mk("writable", v1.RecursiveReadOnlyIfPossible)
	pod.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
	if _, err := cluster.Client().CoreV1().Pods(ns).Create(ctxT(t), pod, metav1.CreateOptions{}); err == nil {
		// The API server validates it too; a server that did not is
		// answered by the node as the kubelet would.
		p := waitFor(t, ns, "writable", time.Minute, "config error", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		t.Logf("writable: %s", p.Status.ContainerStatuses[0].State.Waiting.Message)
	}
}

// supplementalGroupsPolicy as the kubelet's e2e checks it: user 1000, whom
// the image's /etc/group puts in 50000, with supplementalGroups 60000 gets
// "1000 50000 60000" under Merge and "1000 60000" under Strict, in `id -G`
// and in the container status's user.linux; the node says it has the
// feature.
func TestPodFieldsSupplementalGroupsPolicy(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	n, err := cluster.Client().CoreV1().Nodes().Get(ctxT(t), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// busybox whose /etc/group puts user 1000 in group 50000.
	const ref = "hostlet.local/busybox-groups:1"
	img, err := images.BuildBusyboxWith(ctxT(t), t.TempDir(), ref, map[string][]byte{
		"etc/group": []byte("root:x:0:\nnobody:x:65534:\nuser:x:1000:\nimagegroup:x:50000:user\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ImportImage(ctxT(t), img.Archive); err != nil {
		t.Fatal(err)
	}
	if f := n.Status.Features; f == nil || f.SupplementalGroupsPolicy == nil || !*f.SupplementalGroupsPolicy {
		t.Errorf("node status.features %+v", f)
	}
	for _, c := range []struct {
		name   string
		policy *v1.SupplementalGroupsPolicy
		want   []int64
	}{
		{"unset", nil, []int64{1000, 50000, 60000}},
		{"merge", ptrTo(v1.SupplementalGroupsPolicyMerge), []int64{1000, 50000, 60000}},
		{"strict", ptrTo(v1.SupplementalGroupsPolicyStrict), []int64{1000, 60000}},
	} {
		pod := busybox(ns, c.name, "sh", "-c", "id -G; exec sleep 3600")
		pod.Spec.Containers[0].Image = ref
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(0))
		pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)),
			SupplementalGroups: []int64{60000}, SupplementalGroupsPolicy: c.policy}
		cluster.CreatePod(t, pod)
		p := waitFor(t, ns, c.name, 2*time.Minute, "running with a user", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil &&
				p.Status.ContainerStatuses[0].User != nil
		})
		u := p.Status.ContainerStatuses[0].User.Linux
		if u == nil || u.UID != 1000 || u.GID != 1000 || !slices.Equal(u.SupplementalGroups, c.want) {
			t.Errorf("%s: status user.linux %+v, want uid 1000 gid 1000 groups %v", c.name, u, c.want)
		}
		want := make([]string, len(c.want))
		for i, g := range c.want {
			want[i] = strconv.FormatInt(g, 10)
		}
		out := podLogHas(t, ctxT(t), ns, c.name, "\n")
		if got := strings.TrimSpace(out); got != strings.Join(want, " ") {
			t.Errorf("%s: id -G = %q, want %q", c.name, got, strings.Join(want, " "))
		}
	}
}

// selfSignedPEM is a throwaway CA certificate, PEM-encoded.
func selfSignedPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(0, 0).Add(100 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// pemSet is the set of certificates (DER) in a PEM text.
func pemSet(text string) map[string]bool {
	out := map[string]bool{}
	rest := []byte(text)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		out[string(b.Bytes)] = true
	}
}

// Projected clusterTrustBundle sources, as the kubelet writes them: by
// name, by signer and label selector (each certificate once, whichever
// bundles hold it), and an optional one that matches nothing as an empty
// file.
func TestPodFieldsClusterTrustBundle(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	c := cluster.Client()
	if _, err := c.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1beta1"); err != nil {
		t.Skipf("the API server serves no certificates.k8s.io/v1beta1 ClusterTrustBundles (%v): the harness enables them only on its own control plane", err)
	}
	ns := cluster.NewNamespace(t)
	suffix := ns[len(ns)-8:]
	ca1, ca2 := selfSignedPEM(t, "e2e-ca-1"), selfSignedPEM(t, "e2e-ca-2")
	signer := "e2e.hostlet.local/" + suffix
	bundles := []*certificatesv1beta1.ClusterTrustBundle{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-byname-" + suffix},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{TrustBundle: string(ca1)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e.hostlet.local:" + suffix + ":a", Labels: map[string]string{"pick": "yes"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: string(ca1) + string(ca2)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e.hostlet.local:" + suffix + ":b", Labels: map[string]string{"pick": "yes"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: string(ca2)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e.hostlet.local:" + suffix + ":c", Labels: map[string]string{"pick": "no"}},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: string(selfSignedPEM(t, "e2e-ca-3"))}},
	}
	for _, b := range bundles {
		if _, err := c.CertificatesV1beta1().ClusterTrustBundles().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := b.Name
		t.Cleanup(func() {
			_ = c.CertificatesV1beta1().ClusterTrustBundles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	pod := busybox(ns, "ctb", "sh", "-c", "cat /ctb/byname.pem; echo ====; cat /ctb/bysigner.pem; echo ====; wc -c < /ctb/missing.pem")
	pod.Spec.Volumes = []v1.Volume{{Name: "ctb", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{
			{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Name: ptrTo("e2e-byname-" + suffix), Path: "byname.pem"}},
			{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{SignerName: ptrTo(signer),
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pick": "yes"}}, Path: "bysigner.pem"}},
			{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Name: ptrTo("e2e-missing-" + suffix), Optional: ptrTo(true), Path: "missing.pem"}},
		}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "ctb", MountPath: "/ctb"}}
	out := runOutput(t, pod)
	parts := strings.Split(out, "====\n")
	if len(parts) != 3 {
		t.Fatalf("output %q", out)
	}
	if parts[0] != string(ca1) {
		t.Errorf("byname.pem = %q, want the bundle's certificate", parts[0])
	}
	got, want := pemSet(parts[1]), pemSet(string(ca1)+string(ca2))
	if len(got) != 2 || !maps.Equal(got, want) || strings.Count(parts[1], "BEGIN CERTIFICATE") != 2 {
		t.Errorf("bysigner.pem = %q, want ca1 and ca2 once each", parts[1])
	}
	if strings.TrimSpace(parts[2]) != "0" {
		t.Errorf("missing.pem size %q, want empty", parts[2])
	}
}

// fileKeyRef (EnvFiles, beta and on in 1.35): an env var from a key of an
// env file an init container wrote on an emptyDir; an optional key the
// file lacks leaves the variable out, a required one is the kubelet's
// CreateContainerConfigError.
func TestPodFieldsFileKeyRef(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	mk := func(name, key string, optional bool) *v1.Pod {
		pod := busybox(ns, name, "sh", "-c", `echo "GREETING=[$GREETING] OTHER=${OTHER-unset}"`)
		pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		pod.Spec.InitContainers = []v1.Container{{Name: "write", Image: pod.Spec.Containers[0].Image,
			Command:      []string{"sh", "-c", "printf \"# written by init\\nGREETING='hello from init'\\n\" > /cfg/app.env"},
			VolumeMounts: []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}}}
		pod.Spec.Containers[0].Env = []v1.EnvVar{
			{Name: "GREETING", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "cfg", Path: "app.env", Key: "GREETING"}}},
			{Name: "OTHER", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "cfg", Path: "app.env", Key: key, Optional: ptrTo(optional)}}},
		}
		return pod
	}
	if out := runOutput(t, mk("optional", "MISSING", true)); strings.TrimSpace(out) != "GREETING=[hello from init] OTHER=unset" {
		t.Errorf("output %q", out)
	}
	cluster.CreatePod(t, mk("required", "MISSING", false))
	p := waitFor(t, ns, "required", 2*time.Minute, "config error", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
	})
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.HasPrefix(msg, `environment variable key "MISSING" not found in file "`) {
		t.Errorf("message %q", msg)
	}
}

// hostnameOverride (HostnameOverride, beta and on in 1.35): the pod's
// hostname is the override, dots and all, with no FQDN from its
// subdomain; /etc/hosts names the pod IP with it alone.
func TestPodFieldsHostnameOverride(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "override", "sh", "-c", "hostname; cat /etc/hostname; grep -v '^#' /etc/hosts | grep my.custom")
	pod.Spec.Hostname, pod.Spec.Subdomain = "ignored", "sub"
	pod.Spec.HostnameOverride = ptrTo("my.custom-host")
	out := runOutput(t, pod)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "my.custom-host" || lines[1] != "my.custom-host" || len(strings.Fields(lines[2])) != 2 || strings.Fields(lines[2])[1] != "my.custom-host" {
		t.Fatalf("hostname, /etc/hostname, /etc/hosts: %q", out)
	}
}

// Projected podCertificate sources (PodCertificateRequest, beta in 1.35):
// the node makes a key and a PodCertificateRequest for the pod, which the
// test signs as the signer would; the pod starts with the key, the chain
// and both together in its volume.
func TestPodFieldsPodCertificate(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	c := cluster.Client()
	res, err := c.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/v1beta1")
	if err != nil || !slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "podcertificaterequests" }) {
		t.Skipf("the API server serves no PodCertificateRequests (%v): the harness enables them only on its own control plane", err)
	}
	ns := cluster.NewNamespace(t)
	const signer = "e2e.hostlet.local/pods"
	pod := busybox(ns, "podcert", "sh", "-c", "cat /certs/key.pem; echo ====; cat /certs/chain.pem; echo ====; cat /certs/creds.pem")
	pod.Spec.Volumes = []v1.Volume{{Name: "certs", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{PodCertificate: &v1.PodCertificateProjection{SignerName: signer, KeyType: "ECDSAP256",
			KeyPath: "key.pem", CertificateChainPath: "chain.pem", CredentialBundlePath: "creds.pem"}}}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "certs", MountPath: "/certs"}}
	cluster.CreatePod(t, pod)
	created, err := c.CoreV1().Pods(ns).Get(ctx, "podcert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The signer: a CA of the test's, issuing for the request's key.
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e-pod-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	var pcr *certificatesv1beta1.PodCertificateRequest
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.CertificatesV1beta1().PodCertificateRequests(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		pcr = &l.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no PodCertificateRequest from the node: %v", err)
	}
	s := pcr.Spec
	if s.SignerName != signer || s.PodName != "podcert" || s.PodUID != created.UID || string(s.NodeName) != nodeName || s.ServiceAccountName != "default" || s.NodeUID == "" || s.ServiceAccountUID == "" {
		t.Errorf("request spec %+v", s)
	}
	pub, err := x509.ParsePKIXPublicKey(s.PKIXPublicKey)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, ok := pub.(*ecdsa.PublicKey)
	if !ok || ecPub.Curve != elliptic.P256() {
		t.Fatalf("public key %T, want ECDSA P-256", pub)
	}
	sum := sha256.Sum256([]byte(created.UID))
	if !ecdsa.VerifyASN1(ecPub, sum[:], s.ProofOfPossession) {
		t.Error("proof of possession does not verify over the pod UID")
	}
	notBefore := time.Now().Truncate(time.Second)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "podcert"},
		NotBefore: notBefore, NotAfter: notBefore.Add(2 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	chain := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})) +
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	pcr.Status = certificatesv1beta1.PodCertificateRequestStatus{
		Conditions: []metav1.Condition{{Type: certificatesv1beta1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue,
			Reason: "Issued", Message: "by the e2e test", LastTransitionTime: metav1.Now()}},
		CertificateChain: chain,
		NotBefore:        ptrTo(metav1.NewTime(notBefore)),
		BeginRefreshAt:   ptrTo(metav1.NewTime(notBefore.Add(time.Hour))),
		NotAfter:         ptrTo(metav1.NewTime(notBefore.Add(2 * time.Hour))),
	}
	if _, err := c.CertificatesV1beta1().PodCertificateRequests(ns).UpdateStatus(ctx, pcr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("issuing: %v", err)
	}

	p := waitFor(t, ns, "podcert", 2*time.Minute, "finished", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	out, err := cluster.Kubectl(ctx, "-n", ns, "logs", "podcert")
	if err != nil || p.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s: %s %v", p.Status.Phase, out, err)
	}
	parts := strings.Split(out, "====\n")
	if len(parts) != 3 {
		t.Fatalf("output %q", out)
	}
	if parts[1] != chain {
		t.Errorf("chain.pem = %q, want the issued chain", parts[1])
	}
	if parts[2] != parts[0]+chain {
		t.Errorf("creds.pem = %q, want the key then the chain", parts[2])
	}
	blk, _ := pem.Decode([]byte(parts[0]))
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("key.pem = %q", parts[0])
	}
	key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := key.(*ecdsa.PrivateKey); !ok || !k.PublicKey.Equal(ecPub) {
		t.Error("key.pem is not the key the request was for")
	}
}
