package probes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Hook runs a postStart or preStop handler and returns the kubelet's failure
// message with the error. It ends when ctx does (the grace period for
// preStop).
func (pr *Prober) Hook(ctx context.Context, h *v1.LifecycleHandler, t Target, pod *v1.Pod) (string, error) {
	podRef := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	switch {
	case h.Exec != nil:
		out, code, err := t.Exec(ctx, h.Exec.Command, 0)
		if err == nil && code != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), code, out)
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, t.Container.Name, podRef, err, string(out)), err
		}
		return "", nil
	case h.HTTPGet != nil:
		err := pr.hookHTTP(ctx, h.HTTPGet, t)
		if err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, t.Container.Name, podRef, err), err
		}
		return "", nil
	case h.Sleep != nil:
		select {
		case <-pr.clock.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return "", nil
		case <-ctx.Done():
			err := fmt.Errorf("container terminated before sleep hook finished")
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, t.Container.Name, podRef, err), err
		}
	case h.TCPSocket != nil:
		// Deprecated and never run by the kubelet; accepted for compatibility.
		return "", nil
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return "Cannot run handler: " + err.Error(), err
}

// hookHTTP sends the hook's GET; an HTTPS hook answered in plain HTTP is
// retried over HTTP, as the kubelet does.
func (pr *Prober) hookHTTP(ctx context.Context, g *v1.HTTPGetAction, t Target) error {
	req, err := newRequest(ctx, g, t)
	if err != nil {
		return err
	}
	if req.Header.Get("User-Agent") == UserAgent {
		req.Header.Set("User-Agent", "kube-lifecycle/1.35")
	}
	client := &http.Client{Transport: pr.transport}
	resp, err := client.Do(req)
	if err != nil && req.URL.Scheme == "https" {
		retry := req.Clone(ctx)
		retry.URL.Scheme = "http"
		retry.Header.Del("Authorization")
		if r2, err2 := client.Do(retry); err2 == nil {
			resp, err = r2, nil
		}
	}
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
	}
	return err
}
