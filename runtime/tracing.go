package runtime

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"k8s.io/component-base/tracing"
)

// tracingDialOpts are the containerd connection's options for tp: a span
// per gRPC call, with its messages as events and the caller's span as
// parent, as the kubelet's CRI client (k8s.io/cri-client) sets them up.
func tracingDialOpts(tp trace.TracerProvider) []grpc.DialOption {
	if tp == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithMessageEvents(otelgrpc.ReceivedEvents, otelgrpc.SentEvents),
		otelgrpc.WithPropagators(tracing.Propagators()),
		otelgrpc.WithTracerProvider(tp),
	))}
}
