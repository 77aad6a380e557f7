package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/pelletier/go-toml/v2"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultHandler is the name of the handler of pods that name no
// RuntimeClass, as CRI calls it: containerd's default runtime.
const DefaultHandler = ""

// runcHandler is containerd's default runtime name (its default config's
// default_runtime_name).
const runcHandler = "runc"

// RuntimeHandler is one of containerd's CRI runtimes: a RuntimeClass's
// handler names one, and the node reports them in status.runtimeHandlers.
// Users configure them in containerd's config, exactly as for the kubelet
// ([plugins."io.containerd.cri.v1.runtime".containerd.runtimes.<name>]).
type RuntimeHandler struct {
	Name string
	// Type is the containerd runtime (shim), "io.containerd.runc.v2";
	// Path, if set, the shim binary used instead of Type's.
	Type, Path string
	// Options are the runtime's options as containerd's config has them
	// (BinaryName, Root, ...).
	Options map[string]any
	// PrivilegedWithoutHostDevices keeps the host's devices out of
	// privileged containers (AllDevicesAllowed still allows them all in
	// the device cgroup), as CRI does.
	PrivilegedWithoutHostDevices, PrivilegedWithoutHostDevicesAllDevicesAllowed bool
	// UserNamespaces: pods of this handler may have hostUsers: false
	// (containerd found the runtime able to, and so did hostlet).
	UserNamespaces bool
	// RecursiveReadOnlyMounts: the runtime makes volumeMounts'
	// recursiveReadOnly mounts (its "rro" mount option, on a kernel that
	// has mount_setattr).
	RecursiveReadOnlyMounts bool
	// Unsupported says why hostlet refuses to run pods with this handler
	// ("" when it runs them).
	Unsupported string

	runc *runcoptions.Options
}

// UnknownHandlerError is a handler containerd has no runtime for, in
// containerd's words.
type UnknownHandlerError struct{ Name string }

func (e *UnknownHandlerError) Error() string {
	return fmt.Sprintf("no runtime for %q is configured", e.Name)
}

// criRuntime is a runtime of containerd's CRI config as Status(verbose)
// marshals it (internal/cri/config.Runtime's JSON names).
type criRuntime struct {
	Type                                          string         `json:"runtimeType"`
	Path                                          string         `json:"runtimePath"`
	Options                                       map[string]any `json:"options"`
	PrivilegedWithoutHostDevices                  bool           `json:"privileged_without_host_devices"`
	PrivilegedWithoutHostDevicesAllDevicesAllowed bool           `json:"privileged_without_host_devices_all_devices_allowed"`
	CgroupWritable                                bool           `json:"cgroupWritable"`
	BaseRuntimeSpec                               string         `json:"baseRuntimeSpec"`
	NetworkPluginConfDir                          string         `json:"cniConfDir"`
	Snapshotter                                   string         `json:"snapshotter"`
	Sandboxer                                     string         `json:"sandboxer"`
}

// criConfig is the part of containerd's CRI config (Status's
// Info["config"]) that says which runtimes pods may ask for.
type criConfig struct {
	Containerd struct {
		DefaultRuntimeName string                `json:"defaultRuntimeName"`
		Runtimes           map[string]criRuntime `json:"runtimes"`
	} `json:"containerd"`
}

// ParseCRIHandlers builds the handler table from containerd's CRI status:
// configJSON its Info["config"], features its RuntimeHandlers. The default
// runtime is also the handler "" (as containerd reports it). userns says
// whether hostlet itself can give pods user namespaces.
func ParseCRIHandlers(configJSON string, features []*criapi.RuntimeHandler, userns bool) (map[string]*RuntimeHandler, error) {
	var cfg criConfig
	if err := json.Unmarshal([]byte(configJSON), &cfg); err != nil {
		return nil, fmt.Errorf("containerd's CRI config: %w", err)
	}
	rts := cfg.Containerd.Runtimes
	if _, ok := rts[cfg.Containerd.DefaultRuntimeName]; !ok {
		return nil, fmt.Errorf("containerd's CRI config has no runtime for its default %q", cfg.Containerd.DefaultRuntimeName)
	}
	usernsOf, rroOf := map[string]bool{}, map[string]bool{}
	for _, f := range features {
		usernsOf[f.GetName()] = f.GetFeatures().GetUserNamespaces()
		rroOf[f.GetName()] = f.GetFeatures().GetRecursiveReadOnlyMounts()
	}
	out := map[string]*RuntimeHandler{}
	for name, rt := range rts {
		h := handlerOf(name, rt)
		h.UserNamespaces = userns && usernsOf[name]
		h.RecursiveReadOnlyMounts = rroOf[name]
		out[name] = h
		if name == cfg.Containerd.DefaultRuntimeName {
			d := *h
			d.Name = DefaultHandler
			out[DefaultHandler] = &d
		}
	}
	return out, nil
}

// handlerOf checks a runtime of containerd's config: hostlet runs each
// container as a containerd container of its own, which only runc's shim
// runs as asked for. The VM and user-space kernel runtimes (kata's
// io.containerd.kata.v2, gVisor's io.containerd.runsc.v1) group a pod's
// containers by CRI's sandbox annotations into one sandbox, which hostlet
// does not make: such a pod is refused rather than run in pieces. So is a
// runtime whose settings hostlet would otherwise ignore (a base spec, a
// network or snapshotter of its own, a shim-run sandbox).
func handlerOf(name string, rt criRuntime) *RuntimeHandler {
	h := &RuntimeHandler{Name: name, Type: rt.Type, Path: rt.Path, Options: rt.Options,
		PrivilegedWithoutHostDevices:                  rt.PrivilegedWithoutHostDevices,
		PrivilegedWithoutHostDevicesAllDevicesAllowed: rt.PrivilegedWithoutHostDevicesAllDevicesAllowed}
	var unsupported []string
	if rt.Type != defaults.DefaultRuntime {
		h.Unsupported = fmt.Sprintf("runtime handler %q has runtime type %q: hostlet runs pods only with %s runtimes (a pod sandbox of %s is CRI's, which hostlet does not use)",
			name, rt.Type, defaults.DefaultRuntime, rt.Type)
		return h
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{rt.BaseRuntimeSpec != "", "base_runtime_spec"},
		{rt.NetworkPluginConfDir != "", "cni_conf_dir"},
		{rt.Snapshotter != "", "snapshotter"},
		{rt.Sandboxer != "" && rt.Sandboxer != "podsandbox", "sandboxer"},
		{rt.CgroupWritable, "cgroup_writable"},
	} {
		if f.set {
			unsupported = append(unsupported, f.name)
		}
	}
	if len(unsupported) > 0 {
		h.Unsupported = fmt.Sprintf("runtime handler %q sets %s, which hostlet does not apply", name, strings.Join(unsupported, ", "))
		return h
	}
	opts, err := runcOptions(rt.Options)
	if err != nil {
		h.Unsupported = fmt.Sprintf("runtime handler %q: %v", name, err)
		return h
	}
	h.runc = opts
	return h
}

// runcOptions decodes a runtime's options as containerd does
// (GenerateRuntimeOptions: through TOML, whose keys match the fields by
// name, case-insensitively). JSON turned every number into a float.
func runcOptions(m map[string]any) (*runcoptions.Options, error) {
	opts := &runcoptions.Options{}
	if len(m) == 0 {
		return opts, nil
	}
	b, err := toml.Marshal(integralFloats(m))
	if err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	if err := toml.Unmarshal(b, opts); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	return opts, nil
}

func integralFloats(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case float64:
			if x == float64(int64(x)) {
				v = int64(x)
			}
		case map[string]any:
			v = integralFloats(x)
		}
		out[k] = v
	}
	return out
}

// defaultHandlers is the table without containerd's CRI plugin (Docker's
// containerd.io package turns it off): containerd's default runtime, runc
// with its default options, as "" and "runc"; rro: it makes recursive
// read-only mounts, as hostlet found.
func defaultHandlers(userns, rro bool) map[string]*RuntimeHandler {
	out := map[string]*RuntimeHandler{}
	for _, name := range []string{DefaultHandler, runcHandler} {
		out[name] = &RuntimeHandler{Name: name, Type: defaults.DefaultRuntime, UserNamespaces: userns,
			RecursiveReadOnlyMounts: rro, runc: &runcoptions.Options{}}
	}
	return out
}

// handlerTable caches the handlers containerd last reported.
type handlerTable struct {
	mu     sync.Mutex
	byName map[string]*RuntimeHandler // nil until loaded
}

// loadHandlers asks containerd's CRI plugin for its runtimes (Status,
// verbose: the config it runs with, and the features it found each
// runtime to have). The plugin off, only the default handler is there.
func (r *Runtime) loadHandlers(ctx context.Context) (map[string]*RuntimeHandler, error) {
	conn, ok := r.client.Conn().(grpc.ClientConnInterface)
	if !ok {
		return nil, errors.New("containerd client has no gRPC connection")
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := criapi.NewRuntimeServiceClient(conn).Status(sctx, &criapi.StatusRequest{Verbose: true})
	if err != nil && status.Code(err) != codes.Unimplemented {
		return nil, fmt.Errorf("containerd's runtime handlers: %w", err)
	}
	// Checked once, so only once containerd answers.
	userns := r.UserNamespacesSupported(ctx) == nil
	var out map[string]*RuntimeHandler
	switch {
	case err != nil: // Unimplemented: no CRI plugin
		out = defaultHandlers(userns, r.recursiveReadOnlySupported(ctx))
	default:
		cfg, ok := resp.GetInfo()["config"]
		if !ok {
			return nil, errors.New("containerd's CRI status has no config")
		}
		if out, err = ParseCRIHandlers(cfg, resp.GetRuntimeHandlers(), userns); err != nil {
			return nil, err
		}
	}
	r.handlers.mu.Lock()
	changed := !maps.EqualFunc(r.handlers.byName, out, func(a, b *RuntimeHandler) bool { return a.Unsupported == b.Unsupported })
	r.handlers.byName = out
	r.handlers.mu.Unlock()
	if changed {
		for _, name := range slices.Sorted(maps.Keys(out)) {
			if h := out[name]; h.Unsupported != "" && name != DefaultHandler {
				log.Warn(h.Unsupported + "; its pods are refused")
			}
		}
	}
	return out, nil
}

// RuntimeHandlers reads containerd's handlers anew: those hostlet runs
// pods with, sorted by name as containerd lists them ("" first).
func (r *Runtime) RuntimeHandlers(ctx context.Context) ([]RuntimeHandler, error) {
	table, err := r.loadHandlers(ctx)
	if err != nil {
		return nil, err
	}
	var out []RuntimeHandler
	for _, name := range slices.Sorted(maps.Keys(table)) {
		if h := table[name]; h.Unsupported == "" {
			out = append(out, *h)
		}
	}
	return out, nil
}

// RuntimeHandler is the handler of that name, from the table containerd
// last gave, read again if it lacks the name (a handler just configured).
// A handler containerd does not have is an *UnknownHandlerError; one hostlet
// does not run pods with, an error saying why.
func (r *Runtime) RuntimeHandler(ctx context.Context, name string) (*RuntimeHandler, error) {
	r.handlers.mu.Lock()
	h, ok := r.handlers.byName[name]
	r.handlers.mu.Unlock()
	if !ok {
		table, err := r.loadHandlers(ctx)
		if err != nil {
			return nil, err
		}
		if h, ok = table[name]; !ok {
			return nil, &UnknownHandlerError{Name: name}
		}
	}
	if h.Unsupported != "" {
		return nil, errors.New(h.Unsupported)
	}
	return h, nil
}

// newContainerOpts are the containerd runtime options of a container of
// handler h below parent: h's runtime and options, with runc's cgroup
// driver hostlet's (runc's systemd driver reads cgroupsPath as
// "slice:prefix:name"). Decided by the parent, as withCgroupParent does,
// so a pod made before hostlet used the systemd driver keeps containerd's
// default place.
func (h *RuntimeHandler) newContainerOpts(parent string) containerd.NewContainerOpts {
	opts := &runcoptions.Options{}
	if h.runc != nil {
		opts = proto.Clone(h.runc).(*runcoptions.Options)
	}
	opts.SystemdCgroup = strings.HasSuffix(parent, ".slice")
	name := h.Type
	if h.Path != "" {
		// containerd starts the shim at an absolute runtime name.
		name = h.Path
	}
	return containerd.WithRuntime(name, opts)
}
