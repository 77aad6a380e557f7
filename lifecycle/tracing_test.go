package lifecycle

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Each sync is a syncPod span and the termination a syncTerminatingPod
// one, with the kubelet's k8s.pod attributes; without a tracer the worker
// runs as before (every other scenario).
func TestSyncSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newScenario(t, testPod("a"), func(s *scenario) { s.tracer = tp.Tracer("test") })
	s.wantCalls("start a#0")
	s.delete(30)
	// The termination's span ends after it handed the pod to Terminated:
	// once the worker is done.
	<-s.w.Done()
	names := map[string]int{}
	for _, span := range rec.Ended() {
		names[span.Name()]++
		want := map[attribute.Key]string{"k8s.pod.uid": "uid-1", "k8s.pod.name": "p", "k8s.namespace.name": "ns", "k8s.pod": "ns/p"}
		for _, kv := range span.Attributes() {
			if w, ok := want[kv.Key]; ok {
				if kv.Value.AsString() != w {
					t.Errorf("%s: %s=%q, want %q", span.Name(), kv.Key, kv.Value.AsString(), w)
				}
				delete(want, kv.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("%s lacks %v", span.Name(), want)
		}
	}
	if names["syncPod"] == 0 || names["syncTerminatingPod"] != 1 {
		t.Errorf("spans %v, want syncPod and one syncTerminatingPod", names)
	}
}
