package main

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	"k8s.io/utils/ptr"
)

// The file's tracing is taken as the kubelet's, validated with its
// messages, and never refused or warned about.
func TestTracingConfig(t *testing.T) {
	dir := t.TempDir()
	o := parseArgs(t, "--config", writeFile(t, dir, "k.yaml", kcHeader+"tracing:\n  endpoint: 127.0.0.1:4317\n  samplingRatePerMillion: 1000000\n"))
	tc := o.kubeletConfig.Tracing
	if tc == nil || ptrOr(tc.Endpoint, "") != "127.0.0.1:4317" || ptrOr(tc.SamplingRatePerMillion, 0) != 1000000 {
		t.Fatalf("tracing %+v", tc)
	}
	for _, w := range o.warnings {
		if strings.Contains(w, "tracing") {
			t.Errorf("warned: %s", w)
		}
	}
	if parseArgs(t).kubeletConfig.Tracing != nil {
		t.Error("tracing set without a file")
	}
	for body, want := range map[string]string{
		"tracing:\n  samplingRatePerMillion: 1000001\n": "sampling rate per million must be less than or equal to one million",
		"tracing:\n  samplingRatePerMillion: -1\n":      "sampling rate must be positive",
		"tracing:\n  endpoint: http://collector:4317\n": "unsupported scheme",
	} {
		var p options
		err := p.parse([]string{"--config", writeFile(t, dir, "bad.yaml", kcHeader+body)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// No tracing configured: a noop provider, as the kubelet's (nothing
// recorded, nothing dialed); configured: component-base's SDK provider,
// sampling as told.
func TestNewTracerProvider(t *testing.T) {
	ctx := context.Background()
	tp, err := newTracerProvider(ctx, nil, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, sdk := tp.(*sdktrace.TracerProvider); sdk {
		t.Error("an SDK provider without tracing configured")
	}
	_, span := tp.Tracer("test").Start(ctx, "syncPod")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("the noop provider records")
	}
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Error(err)
	}

	for rate, sampled := range map[int32]bool{1000000: true, 0: false} {
		tp, err = newTracerProvider(ctx, &tracingapi.TracingConfiguration{
			Endpoint: ptr.To("127.0.0.1:4317"), SamplingRatePerMillion: ptr.To(rate),
		}, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if _, sdk := tp.(*sdktrace.TracerProvider); !sdk {
			t.Errorf("rate %d: %T, want the SDK's provider", rate, tp)
		}
		_, span = tp.Tracer("test").Start(ctx, "syncPod")
		if span.SpanContext().IsSampled() != sampled {
			t.Errorf("rate %d: sampled %v", rate, span.SpanContext().IsSampled())
		}
		// Not ended: nothing is exported to the absent collector.
		sctx, cancel := context.WithCancel(ctx)
		cancel()
		_ = tp.Shutdown(sctx)
	}
}
