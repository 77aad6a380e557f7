package e2e

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Port forwarding reaches a server bound to the pod's own localhost, which
// only works from inside the pod's network namespace, as with the kubelet.
func TestPortForward(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	cluster.CreatePod(t, testapp(ns, "pf", "--http=127.0.0.1:9090"))
	waitPhase(t, ns, "pf", v1.PodRunning)

	cfg := cluster.RESTConfig()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := cluster.Client().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name("pf").SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:9090"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errs:
		t.Fatal(err)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	// Running says the process started, not that it listens yet (there is
	// no probe on localhost): each request is a new forwarded connection, so
	// a refused one is tried again, bounded.
	var b []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(ports[0].Local)) + "/echo?msg=forwarded")
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the forward: %v %q", err, b)
		}
	}
	if string(b) != "forwarded" {
		t.Fatalf("through the forward: %q", b)
	}
}
