package main

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.12.0"
	"k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"
)

// tracingFlushTimeout bounds the export of the spans still batched when
// hostlet stops: a collector gone must not hold the shutdown.
const tracingFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider of the configuration's tracing
// (KubeletConfiguration tracing, validated with the kubelet's checks when
// it was loaded) into o.tracer, which the runtime (containerd's gRPC
// calls), the pod workers (syncPod) and podspec (image pulls) are given.
// stop exports what is left and stops it.
func (o *options) startTracing(ctx context.Context, nodeName string) (stop func(), err error) {
	var tc *tracingapi.TracingConfiguration
	if o.kubeletConfig != nil {
		tc = o.kubeletConfig.Tracing
	}
	tp, err := newTracerProvider(ctx, tc, nodeName)
	if err != nil {
		return nil, err
	}
	o.tracer = tp
	if tc != nil {
		log.WithField("endpoint", ptrOr(tc.Endpoint, "localhost:4317")).
			WithField("samplingRatePerMillion", ptrOr(tc.SamplingRatePerMillion, 0)).
			Info("tracing to an OTLP gRPC collector")
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.WithError(err).Warn("tracing: spans not exported at shutdown")
		}
	}, nil
}

// newTracerProvider is the kubelet's newTracerProvider: no tracing
// configuration, a noop provider (the default: the kubelet traces nothing
// unless told where to); else component-base's provider (OTLP gRPC to the
// endpoint, localhost:4317 when unset, sampled at samplingRatePerMillion,
// never when unset, a sampled parent's children always), its spans from
// service "kubelet" (hostlet stands in for it: what reads the kubelet's
// traces finds the node's) on host nodeName.
func newTracerProvider(ctx context.Context, tc *tracingapi.TracingConfiguration, nodeName string) (tracing.TracerProvider, error) {
	if tc == nil {
		return tracing.NewNoopTracerProvider(), nil
	}
	tp, err := tracing.NewProvider(ctx, tc, []otlptracegrpc.Option{}, []resource.Option{
		resource.WithAttributes(
			semconv.ServiceNameKey.String("kubelet"),
			semconv.HostNameKey.String(nodeName),
		),
	})
	if err != nil {
		return nil, fmt.Errorf("could not configure tracer provider: %w", err)
	}
	return tp, nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
