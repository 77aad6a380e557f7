package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/hostlet/hostlet/test/harness"
	"github.com/hostlet/hostlet/test/images"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
)

// collector is an OTLP gRPC trace collector in the test process: every
// span exported to it, with its resource's attributes.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []collected
	changed chan struct{} // closed and replaced on each export
}

type collected struct {
	span     *tracepb.Span
	resource map[string]string
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{changed: make(chan struct{})}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return c, ln.Addr().String()
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, collected{span: s, resource: res})
			}
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// waitFor waits until match holds for the spans received so far.
func (c *collector) waitFor(ctx context.Context, what string, match func([]collected) bool) error {
	for {
		c.mu.Lock()
		ok, changed := match(c.spans), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s: %w", what, ctx.Err())
		case <-changed:
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

// KubeletConfiguration tracing: a node told to trace every request
// (samplingRatePerMillion 1000000) exports to the OTLP gRPC endpoint, as
// service "kubelet" on its host, the spans of a pod's run: syncPod with
// the kubelet's k8s.pod attributes, the image pull (pullPolicy Always from
// a loopback registry) inside it, and containerd's gRPC calls inside that;
// the API client's requests.
func TestTracing(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	col, endpoint := startCollector(t)
	reg, err := images.StartRegistry("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := cluster.AllowInsecureRegistry(reg.Addr()); err != nil {
		t.Fatal(err)
	}
	image, err := reg.Push(ctx, localImage(t, images.BusyboxRef), "traced/busybox:1.0")
	if err != nil {
		t.Fatal(err)
	}
	const name = "hostlet-tracing"
	extraNode(t, harness.HostletOptions{NodeName: name,
		KubeletConfig: kcHeader + fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", endpoint)})
	ns := cluster.NewNamespace(t)
	pod := imagePod(ns, "traced", image, v1.PullAlways)
	pod.Spec.NodeName = name
	cluster.CreatePod(t, pod)
	uid := string(waitReady(t, ns, pod.Name).UID)

	// The pod's pull, inside one of its syncs, with containerd's calls
	// inside that sync's trace.
	var syncPod, pull *tracepb.Span
	err = col.waitFor(ctx, "syncPod, pullImage and containerd spans of the pod", func(spans []collected) bool {
		syncs := map[string]*tracepb.Span{} // by span ID
		pull = nil
		for _, s := range spans {
			a := attrs(s.span.Attributes)
			if a["k8s.pod.uid"] != uid {
				continue
			}
			switch s.span.Name {
			case "syncPod":
				syncs[string(s.span.SpanId)] = s.span
			case "pullImage":
				if a["image"] == image {
					pull = s.span
				}
			}
		}
		if pull == nil || syncs[string(pull.ParentSpanId)] == nil {
			return false
		}
		syncPod = syncs[string(pull.ParentSpanId)]
		for _, s := range spans {
			if strings.HasPrefix(s.span.Name, "containerd.services.") && string(s.span.TraceId) == string(pull.TraceId) {
				return true
			}
		}
		return false
	})
	if err != nil {
		col.mu.Lock()
		for _, s := range col.spans {
			t.Logf("span %s %v", s.span.Name, attrs(s.span.Attributes))
		}
		col.mu.Unlock()
		t.Fatal(err)
	}
	// The API client's requests (the pod's status written, the Lease
	// renewed) are spans too, as the kubelet's.
	err = col.waitFor(ctx, "API client spans", func(spans []collected) bool {
		for _, s := range spans {
			if strings.HasPrefix(s.span.Name, "HTTP ") && s.resource["host.name"] == name {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Error(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var calls []string
	for _, s := range col.spans {
		if string(s.span.TraceId) == string(pull.TraceId) && strings.HasPrefix(s.span.Name, "containerd.") {
			calls = append(calls, s.span.Name)
		}
		if string(s.span.SpanId) == string(syncPod.SpanId) {
			if r := s.resource; r["service.name"] != "kubelet" || r["host.name"] != name {
				t.Errorf("resource %v: want service.name kubelet, host.name %s", r, name)
			}
		}
	}
	a := attrs(syncPod.Attributes)
	if a["k8s.pod.name"] != pod.Name || a["k8s.namespace.name"] != ns || a["k8s.pod"] != ns+"/"+pod.Name {
		t.Errorf("syncPod attributes %v", a)
	}
	t.Logf("%d spans; the pull's trace has containerd calls %v", len(col.spans), calls)
}
