package podspec

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/runtime"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// handlerRuntime has containerd's handlers and no sandboxes; anything
// else of the runtime panics (the nil interface): a refused pod makes
// nothing.
type handlerRuntime struct {
	ContainerRuntime
	handlers map[string]*runtime.RuntimeHandler
}

func (f handlerRuntime) RuntimeHandler(_ context.Context, name string) (*runtime.RuntimeHandler, error) {
	h, ok := f.handlers[name]
	if !ok {
		return nil, &runtime.UnknownHandlerError{Name: name}
	}
	return h, nil
}

func (handlerRuntime) Sandbox(uid string) (*runtime.Sandbox, error) { return nil, fs.ErrNotExist }

func (handlerRuntime) UserNamespacesSupported(context.Context) error { return nil }

func runtimeClasses(classes ...*nodev1.RuntimeClass) nodelisters.RuntimeClassLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, rc := range classes {
		_ = idx.Add(rc)
	}
	return nodelisters.NewRuntimeClassLister(idx)
}

func runtimeClass(name, handler string) *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
}

func classPod(class *string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}}
	p.Spec.RuntimeClassName = class
	return p
}

func handlerTestRuntime(cfg Config) *Runtime {
	rt := handlerRuntime{handlers: map[string]*runtime.RuntimeHandler{
		"":     {Name: "", Type: "io.containerd.runc.v2", UserNamespaces: true},
		"runc": {Name: "runc", Type: "io.containerd.runc.v2", UserNamespaces: true},
		"crun": {Name: "crun", Type: "io.containerd.runc.v2"},
	}}
	cfg.Runtime = rt
	if cfg.RuntimeClasses == nil {
		cfg.RuntimeClasses = runtimeClasses(runtimeClass("fast", "crun"), runtimeClass("gvisor", "runsc"), runtimeClass("plain", "runc"))
	}
	return &Runtime{cfg: cfg, rt: rt}
}

// A pod's RuntimeClass resolves to its handler as the kubelet resolves
// it; a RuntimeClass not found or a handler containerd does not have
// fails the sandbox with the kubelet's and containerd's words.
func TestRuntimeHandlerResolution(t *testing.T) {
	r := handlerTestRuntime(Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		class   *string
		handler string
		err     string
	}{
		{nil, "", ""},
		{ptr.To(""), "", ""},
		{ptr.To("fast"), "crun", ""},
		{ptr.To("plain"), "runc", ""},
		{ptr.To("gvisor"), "", `unable to get OCI runtime for sandbox "uid-1": no runtime for "runsc" is configured`},
		{ptr.To("missing"), "", `runtimeclass.node.k8s.io "missing" not found`},
	} {
		h, err := r.runtimeHandler(ctx, classPod(tc.class))
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("class %v: error %v, want %q", ptr.Deref(tc.class, "<nil>"), err, tc.err)
			}
		case err != nil || h.Name != tc.handler:
			t.Errorf("class %v: handler %v, %v; want %q", ptr.Deref(tc.class, "<nil>"), h, err, tc.handler)
		}
	}
	if _, err := r.runtimeHandler(ctx, classPod(ptr.To("missing"))); !apierrors.IsNotFound(err) {
		t.Errorf("a missing RuntimeClass: %v, want NotFound as the kubelet's lister gives it", err)
	}
}

// A pod whose handler cannot run here gets nothing made: PrepareSandbox
// fails before volumes, claims, cgroups or the network (the fake runtime
// panics on any of them).
func TestPrepareSandboxRefusesUnknownHandler(t *testing.T) {
	r := handlerTestRuntime(Config{})
	for _, class := range []string{"gvisor", "missing"} {
		if _, err := r.PrepareSandbox(context.Background(), classPod(ptr.To(class))); err == nil {
			t.Errorf("class %s: sandbox prepared", class)
		}
	}
}

// Without a RuntimeClass lister a pod that names one is refused (never
// run on the default handler); the cache not synced yet is awaited.
func TestRuntimeHandlerWithoutClasses(t *testing.T) {
	r := handlerTestRuntime(Config{})
	r.cfg.RuntimeClasses = nil
	if _, err := r.runtimeHandler(context.Background(), classPod(ptr.To("fast"))); !errors.Is(err, errNoRuntimeClasses) {
		t.Errorf("no lister: %v", err)
	}
	if h, err := r.runtimeHandler(context.Background(), classPod(nil)); err != nil || h.Name != "" {
		t.Errorf("no lister, no class: %v, %v", h, err)
	}

	synced := make(chan struct{})
	r = handlerTestRuntime(Config{RuntimeClassesSynced: func() bool {
		select {
		case <-synced:
			return true
		default:
			return false
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.runtimeHandler(ctx, classPod(ptr.To("fast"))); err == nil || !strings.Contains(err.Error(), "failed to lookup RuntimeClass fast") {
		t.Errorf("cache never synced: %v", err)
	}
	close(synced)
	if h, err := r.runtimeHandler(context.Background(), classPod(ptr.To("fast"))); err != nil || h.Name != "crun" {
		t.Errorf("cache synced: %v, %v", h, err)
	}
}

// hostUsers: false needs the handler's runtime to map IDs, as the
// kubelet's HandlerSupportsUserNamespaces.
func TestUserNSNeedsHandlerSupport(t *testing.T) {
	r := handlerTestRuntime(Config{})
	r.userns = newUsernsAllocator(t.TempDir())
	pod := classPod(ptr.To("fast"))
	pod.Spec.HostUsers = ptr.To(false)
	crun, _ := r.rt.RuntimeHandler(context.Background(), "crun")
	_, err := r.podUserNS(context.Background(), pod, crun)
	if want := "can't set `spec.hostUsers: false`, RuntimeClass handler \"crun\" does not support user namespaces"; err == nil || err.Error() != want {
		t.Errorf("crun: %v, want %q", err, want)
	}
	runc, _ := r.rt.RuntimeHandler(context.Background(), "runc")
	if m, err := r.podUserNS(context.Background(), pod, runc); err != nil || m == nil {
		t.Errorf("runc: %v, %v", m, err)
	}
	noUserns := &runtime.RuntimeHandler{Name: ""}
	if _, err := r.podUserNS(context.Background(), pod, noUserns); err == nil || err.Error() != "can't set `spec.hostUsers: false`, runtime does not support user namespaces" {
		t.Errorf("default without user namespaces: %v", err)
	}
}
