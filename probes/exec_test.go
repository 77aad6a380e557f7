package probes

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Exec probes pass on exit code 0 with the output as message, fail
// otherwise, name a timed-out command, and expand $(VAR) from literal env
// values only.
func TestExecProbe(t *testing.T) {
	var ran []string
	var gotTimeout time.Duration
	code, err := 0, error(nil)
	target := Target{
		Container: &v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "A", Value: "a"}, {Name: "S", ValueFrom: &v1.EnvVarSource{}}}},
		Exec: func(_ context.Context, cmd []string, timeout time.Duration) ([]byte, int, error) {
			ran, gotTimeout = cmd, timeout
			return []byte("out"), code, err
		},
	}
	h := &v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check", "$(A)", "$(S)", "$$(A)"}}}
	pr := NewProber()
	if r, out := pr.Probe(context.Background(), h, target, 3*time.Second); r != Success || out != "out" {
		t.Errorf("exit 0: %v %q", r, out)
	}
	if !slices.Equal(ran, []string{"check", "a", "$(S)", "$(A)"}) || gotTimeout != 3*time.Second {
		t.Errorf("ran %q with timeout %v", ran, gotTimeout)
	}
	code = 1
	if r, out := pr.Probe(context.Background(), h, target, time.Second); r != Failure || out != "out" {
		t.Errorf("exit 1: %v %q", r, out)
	}
	code, err = -1, ErrExecTimeout
	if r, out := pr.Probe(context.Background(), h, target, time.Second); r != Failure || out != `command "check $(A) $(S) $$(A)" timed out` {
		t.Errorf("timeout: %v %q", r, out)
	}
}
