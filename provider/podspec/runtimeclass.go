package podspec

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// errNoRuntimeClasses refuses a pod that names a RuntimeClass when hostlet
// was given no way to read them: it must not run on the default handler.
var errNoRuntimeClasses = errors.New("RuntimeClasses are not readable on this node")

// runtimeHandler is the handler of the pod's RuntimeClass, as the
// kubelet's runtimeClassManager.LookupRuntimeHandler resolves it ("" for
// none), checked against containerd's handlers as its RunPodSandbox checks
// it. The errors are theirs (a RuntimeClass not found; "no runtime for
// %q is configured"): the pod's sandbox fails with them and is retried,
// the pod Pending and nothing of it running, whatever handler it asked for.
func (r *Runtime) runtimeHandler(ctx context.Context, pod *v1.Pod) (*runtime.RuntimeHandler, error) {
	name, err := r.lookupRuntimeHandler(ctx, pod.Spec.RuntimeClassName)
	if err != nil {
		return nil, err
	}
	h, err := r.rt.RuntimeHandler(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("unable to get OCI runtime for sandbox %q: %w", pod.UID, err)
	}
	return h, nil
}

// lookupRuntimeHandler is the kubelet's LookupRuntimeHandler: the handler
// of the RuntimeClass named, "" for none; a RuntimeClass not found is the
// lister's NotFound error. The cache is awaited first: a RuntimeClass not
// listed yet is no RuntimeClass missing.
func (r *Runtime) lookupRuntimeHandler(ctx context.Context, className *string) (string, error) {
	if className == nil || *className == "" {
		return runtime.DefaultHandler, nil
	}
	name := *className
	if r.cfg.RuntimeClasses == nil {
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, errNoRuntimeClasses)
	}
	if synced := r.cfg.RuntimeClassesSynced; synced != nil && !synced() {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, ctx.Err())
		}
	}
	rc, err := r.cfg.RuntimeClasses.Get(name)
	if apierrors.IsNotFound(err) {
		return "", err
	} else if err != nil {
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}
