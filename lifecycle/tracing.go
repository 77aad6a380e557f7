package lifecycle

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.12.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
)

// startSpan starts the span of one of the worker's syncs, named and with
// the attributes of the kubelet's (syncPod, syncTerminatingPod), so that a
// collector shows hostlet's pods as it shows the kubelet's. The runtime
// calls the sync makes (image pulls, containerd's gRPC calls) are its
// children through ctx.
func (p *Pod) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	t := p.cfg.Tracer
	if t == nil {
		t = noop.Tracer{}
	}
	pod := p.pod
	return t.Start(ctx, name, trace.WithAttributes(PodAttributes(pod)...))
}

// PodAttributes are the kubelet's k8s.pod attributes of a pod's spans.
func PodAttributes(pod *v1.Pod) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.K8SPodUIDKey.String(string(pod.UID)),
		attribute.String("k8s.pod", pod.Namespace+"/"+pod.Name),
		semconv.K8SPodNameKey.String(pod.Name),
		semconv.K8SNamespaceNameKey.String(pod.Namespace),
	}
}
