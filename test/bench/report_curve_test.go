package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"regexp"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

func TestParseCounts(t *testing.T) {
	got, err := parseCounts(" 30,110 ,250,")
	if err != nil || len(got) != 3 || got[0] != 30 || got[1] != 110 || got[2] != 250 {
		t.Errorf("parseCounts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "30,x", "0", "-5", ","} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q) took it", bad)
		}
	}
}

func TestMaxPods(t *testing.T) {
	c := config{density: []int{30, 250, 110}, scenarios: map[string]bool{"density": true}}
	if n := maxPods(c); n != 250 {
		t.Errorf("maxPods with the curve = %d, want 250", n)
	}
	c.density = []int{30}
	if n := maxPods(c); n != 110 {
		t.Errorf("maxPods with a small curve = %d, want the default 110", n)
	}
	c = config{density: []int{500}, scenarios: map[string]bool{"burst": true}}
	if n := maxPods(c); n != 110 {
		t.Errorf("maxPods without the density scenario = %d, want 110", n)
	}
}

func TestSubnetFits(t *testing.T) {
	for _, c := range []struct {
		subnet string
		want   int
	}{{"10.244.7.0/24", 253}, {"10.245.0.0/23", 509}, {"10.1.1.0/30", 1}, {"10.1.1.1/32", 0}} {
		if n, err := podAddrs(c.subnet); err != nil || n != c.want {
			t.Errorf("podAddrs(%s) = %d, %v; want %d", c.subnet, n, err, c.want)
		}
	}
	if err := subnetFits("10.244.7.0/24", 250); err != nil {
		t.Errorf("250 pods in a /24: %v", err)
	}
	if err := subnetFits("10.244.7.0/24", 254); err == nil || !strings.Contains(err.Error(), "has 253 addresses for pods") {
		t.Errorf("254 pods in a /24: %v", err)
	}
}

func TestDensityRows(t *testing.T) {
	point := func(allRunning time.Duration, agentCPU time.Duration, agentRSS int64, writes int) *nodeResult {
		return &nodeResult{density: map[int]*densityPoint{100: {
			pods: 100, allRunning: allRunning, window: 30 * time.Second,
			cpu: cpuUse{agent: agentCPU, runtime: agentCPU}, agentRSS: agentRSS, ctrdRSS: 50 << 20, shimsPSS: 100 << 20, writes: writes,
		}}}
	}
	h := point(10*time.Second, 3*time.Second, 50<<20, 15)
	k := point(30*time.Second, 6*time.Second, 100<<20, 30)
	c := config{density: []int{100}, scenarios: map[string]bool{"density": true}}
	tbl := table(c, []string{"hostlet", "kubelet"}, []*nodeResult{h, k})
	for _, want := range []string{
		"| density 100 pods: create → all Running | 10.0 s | 30.0 s | 0.33 | 3.0× faster |",
		// 3 s over 30 s: 100 m, 1 m per pod.
		"| density 100 steady: agent CPU per pod | 1.00 m/pod (100 m) | 2.00 m/pod (200 m) | 0.50 | 2.0× lighter |",
		"| density 100 steady: agent + containerd + shims CPU per pod | 2.00 m/pod (200 m) | 4.00 m/pod (400 m) | 0.50 | 2.0× lighter |",
		"| density 100 steady: agent RSS per pod | 0.50 MiB/pod (50.0 MiB) | 1.00 MiB/pod (100.0 MiB) | 0.50 | 2.0× lighter |",
		"| density 100 steady: agent + containerd RSS + shims PSS per pod | 2.00 MiB/pod (200.0 MiB) | 2.50 MiB/pod (250.0 MiB) | 0.80 | 1.2× lighter |",
		"| density 100 steady: API writes by the node per minute | 30 | 60 | 0.50 | 2.0× fewer |",
	} {
		if !strings.Contains(tbl, want+"\n") {
			t.Errorf("table lacks\n%s\n in:\n%s", want, tbl)
		}
	}
	// A node that did not get to a point shows zeros and no ratio.
	tbl = table(c, []string{"hostlet", "kubelet"}, []*nodeResult{h, {}})
	if !strings.Contains(tbl, "| density 100 steady: agent CPU per pod | 1.00 m/pod (100 m) | 0.00 m/pod (0 m) |  |  |\n") {
		t.Errorf("table with a missing point:\n%s", tbl)
	}
	if strings.Contains(tbl, "join:") {
		t.Errorf("join rows without the join scenario:\n%s", tbl)
	}
}

func TestJoinRows(t *testing.T) {
	// Three joins each: the table gives each phase's median, the outlier
	// (a slow first join on a loaded machine) left out.
	h := &nodeResult{joins: []joinResult{
		{cert: 500 * time.Millisecond, ready: 2 * time.Second, podStart: time.Second, running: 3 * time.Second, writes: 10},
		{cert: 5 * time.Second, ready: 9 * time.Second, podStart: 4 * time.Second, running: 13 * time.Second, writes: 30},
		{cert: 400 * time.Millisecond, ready: 1900 * time.Millisecond, podStart: 900 * time.Millisecond, running: 2800 * time.Millisecond, writes: 11},
	}}
	k := &nodeResult{joins: []joinResult{
		{cert: 1500 * time.Millisecond, ready: 9 * time.Second, podStart: 3 * time.Second, running: 12 * time.Second, writes: 40},
		{cert: 1400 * time.Millisecond, ready: 8 * time.Second, podStart: 2 * time.Second, running: 10 * time.Second, writes: 38},
		{cert: 1600 * time.Millisecond, ready: 10 * time.Second, podStart: 4 * time.Second, running: 14 * time.Second, writes: 42},
	}}
	tbl := table(config{joins: 3, scenarios: map[string]bool{"join": true}}, []string{"hostlet", "kubelet"}, []*nodeResult{h, k})
	for _, want := range []string{
		"| join (p50 of 3): start → client certificate issued | 500 ms | 1500 ms | 0.33 | 3.0× faster |",
		"| join: client certificate issued → Node Ready | 1500 ms | 7500 ms | 0.20 | 5.0× faster |",
		"| join: start → Node Ready | 2000 ms | 9000 ms | 0.22 | 4.5× faster |",
		"| join: first pod, created once Ready → Running | 1000 ms | 3000 ms | 0.33 | 3.0× faster |",
		"| join: start → first pod Running | 3000 ms | 12.0 s | 0.25 | 4.0× faster |",
		"| join: API writes by the node, start → pod Running | 11 | 40 | 0.28 | 3.6× fewer |",
	} {
		if !strings.Contains(tbl, want+"\n") {
			t.Errorf("table lacks\n%s\n in:\n%s", want, tbl)
		}
	}
}

func TestNewToken(t *testing.T) {
	tok := newToken()
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(tok) {
		t.Errorf("token %q is not a bootstrap token", tok)
	}
}

func TestCSRCommonName(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{}
	csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	if cn := csrCommonName(csr); cn != "system:node:n1" {
		t.Errorf("CN = %q", cn)
	}
	csr.Spec.Request = []byte("junk")
	if cn := csrCommonName(csr); cn != "" {
		t.Errorf("CN of junk = %q", cn)
	}
}

func TestMarginalRows(t *testing.T) {
	node := func(mem30, mem110 int64, cpu30, cpu110 time.Duration) *nodeResult {
		return &nodeResult{density: map[int]*densityPoint{
			30:  {pods: 30, window: time.Second, agentRSS: mem30, cpu: cpuUse{agent: cpu30}},
			110: {pods: 110, window: time.Second, agentRSS: mem110, cpu: cpuUse{agent: cpu110}},
		}}
	}
	// 80 more pods: 40 MiB and 80 m more on hostlet, 160 MiB and 400 m on the kubelet.
	h := node(100<<20, 140<<20, 20*time.Millisecond, 100*time.Millisecond)
	k := node(200<<20, 360<<20, 100*time.Millisecond, 500*time.Millisecond)
	tbl := table(config{density: []int{30, 110}, scenarios: map[string]bool{"density": true}}, []string{"hostlet", "kubelet"}, []*nodeResult{h, k})
	for _, want := range []string{
		"| density 30 → 110: agent + containerd + shims CPU per added pod | 1.00 m | 5.00 m | 0.20 | 5.0× lighter |",
		"| density 30 → 110: agent + containerd RSS + shims PSS per added pod | 0.50 MiB | 2.00 MiB | 0.25 | 4.0× lighter |",
	} {
		if !strings.Contains(tbl, want+"\n") {
			t.Errorf("table lacks\n%s\n in:\n%s", want, tbl)
		}
	}
}
