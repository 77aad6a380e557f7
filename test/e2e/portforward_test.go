package e2e

import (
	"fmt"
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

	// Running says the process started, not that it listens yet (there is
	// no probe on localhost), and a refused connection ends client-go's
	// forwarder as it ends kubectl port-forward: try again with a new one,
	// bounded.
	var (
		b   []byte
		err error
	)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if b, err = forwardOnce(t, ns, "pf", 9090, "/echo?msg=forwarded"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the forward: %v", err)
		}
	}
	if string(b) != "forwarded" {
		t.Fatalf("through the forward: %q", b)
	}
}

// forwardOnce forwards a local port to the pod's port through the API
// server, as kubectl port-forward does, and GETs path through it.
func forwardOnce(t *testing.T, ns, pod string, port int, path string) ([]byte, error) {
	t.Helper()
	transport, upgrader, err := spdy.RoundTripperFor(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	url := cluster.Client().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errs:
		return nil, err
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(int(ports[0].Local)) + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %q", resp.StatusCode, b)
	}
	return b, err
}
