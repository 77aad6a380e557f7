package runtime

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testdata/cri-status-config.json is Info["config"] of containerd 2.2.9's
// CRI Status(verbose) with the harness's CRI config and two more handlers
// (crun: runc's shim with BinaryName /usr/bin/crun and a Root; runsc:
// gVisor's runtime type); criFeatures its RuntimeHandlers beside it
// (crun 1.8 has no "features" command: containerd found none for it).
var criFeatures = []*criapi.RuntimeHandler{
	{Name: "", Features: &criapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
	{Name: "crun"},
	{Name: "runc", Features: &criapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
	{Name: "runsc"},
}

func criTestConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/cri-status-config.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseCRIHandlers(t *testing.T) {
	table, err := ParseCRIHandlers(criTestConfig(t), criFeatures, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != 4 {
		t.Fatalf("handlers %v, want \"\", crun, runc, runsc", table)
	}
	for _, name := range []string{DefaultHandler, "runc"} {
		h := table[name]
		if h == nil || h.Name != name || h.Type != "io.containerd.runc.v2" || h.Unsupported != "" || !h.UserNamespaces || h.runc == nil || h.runc.BinaryName != "" {
			t.Errorf("handler %q: %+v", name, h)
		}
	}
	crun := table["crun"]
	if crun.Unsupported != "" || crun.runc.BinaryName != "/usr/bin/crun" || !strings.HasSuffix(crun.runc.Root, "/crun") {
		t.Errorf("crun: %+v, options %v", crun, crun.runc)
	}
	if crun.UserNamespaces {
		t.Error("crun: user namespaces though containerd found no features")
	}
	runsc := table["runsc"]
	if !strings.Contains(runsc.Unsupported, `"io.containerd.runsc.v1"`) || !strings.Contains(runsc.Unsupported, `"runsc"`) {
		t.Errorf("runsc is not refused with its type named: %q", runsc.Unsupported)
	}

	// hostlet unable to make user namespaces: no handler has them.
	table, err = ParseCRIHandlers(criTestConfig(t), criFeatures, false)
	if err != nil {
		t.Fatal(err)
	}
	if table[DefaultHandler].UserNamespaces || table["runc"].UserNamespaces {
		t.Error("user namespaces reported that hostlet cannot make")
	}
}

// A runtime's settings hostlet would not apply refuse its pods; numbers
// (JSON's floats) decode into the options' integers as containerd's TOML.
func TestParseCRIHandlersSettings(t *testing.T) {
	cfg := `{"containerd":{"defaultRuntimeName":"runc","runtimes":{
	  "runc":{"runtimeType":"io.containerd.runc.v2","options":{"IoUid":1000,"SystemdCgroup":true,"binaryname":"/opt/runc"},"sandboxer":"podsandbox"},
	  "nvidia":{"runtimeType":"io.containerd.runc.v2","runtimePath":"/opt/shim","options":{"BinaryName":"/usr/bin/nvidia-container-runtime"},"privileged_without_host_devices":true},
	  "spec":{"runtimeType":"io.containerd.runc.v2","baseRuntimeSpec":"/etc/spec.json"},
	  "net":{"runtimeType":"io.containerd.runc.v2","cniConfDir":"/etc/other","snapshotter":"devmapper"},
	  "shim":{"runtimeType":"io.containerd.runc.v2","sandboxer":"shim"},
	  "kata":{"runtimeType":"io.containerd.kata.v2"},
	  "bad":{"runtimeType":"io.containerd.runc.v2","options":{"IoUid":"x"}}}}}`
	table, err := ParseCRIHandlers(cfg, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if o := table["runc"].runc; o.IoUid != 1000 || !o.SystemdCgroup || o.BinaryName != "/opt/runc" {
		t.Errorf("runc options %v", o)
	}
	if table["runc"].UserNamespaces {
		t.Error("user namespaces without containerd's features")
	}
	nv := table["nvidia"]
	if nv.Unsupported != "" || nv.runc.BinaryName != "/usr/bin/nvidia-container-runtime" || !nv.PrivilegedWithoutHostDevices || nv.Path != "/opt/shim" {
		t.Errorf("nvidia: %+v", nv)
	}
	for name, want := range map[string]string{"spec": "base_runtime_spec", "net": "cni_conf_dir, snapshotter", "shim": "sandboxer",
		"kata": "io.containerd.kata.v2", "bad": "options"} {
		if got := table[name].Unsupported; !strings.Contains(got, want) {
			t.Errorf("%s refused with %q, want it to name %q", name, got, want)
		}
	}

	for _, bad := range []string{`{`, `{"containerd":{"defaultRuntimeName":"gone","runtimes":{}}}`} {
		if _, err := ParseCRIHandlers(bad, nil, true); err == nil {
			t.Errorf("config %s accepted", bad)
		}
	}
}

// A container's runtime is its handler's, with runc's cgroup driver
// hostlet's (by the parent), whatever the handler's config says.
func TestHandlerContainerOpts(t *testing.T) {
	table, err := ParseCRIHandlers(criTestConfig(t), criFeatures, true)
	if err != nil {
		t.Fatal(err)
	}
	custom := &RuntimeHandler{Name: "custom", Type: "io.containerd.runc.v2", Path: "/opt/bin/containerd-shim-custom",
		runc: &runcoptions.Options{SystemdCgroup: true, BinaryName: "/opt/bin/custom"}}
	for _, tc := range []struct {
		h            *RuntimeHandler
		parent       string
		name, binary string
		systemd      bool
	}{
		{table[DefaultHandler], "/kubepods/burstable/pod" + testUID, "io.containerd.runc.v2", "", false},
		{table[DefaultHandler], "", "io.containerd.runc.v2", "", false},
		{table[DefaultHandler], "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice", "io.containerd.runc.v2", "", true},
		{table["crun"], "/kubepods.slice/kubepods-podx.slice", "io.containerd.runc.v2", "/usr/bin/crun", true},
		{custom, "/kubepods/podx", "/opt/bin/containerd-shim-custom", "/opt/bin/custom", false},
	} {
		c := &containers.Container{}
		if err := tc.h.newContainerOpts(tc.parent)(context.Background(), nil, c); err != nil {
			t.Fatal(err)
		}
		v, err := typeurl.UnmarshalAny(c.Runtime.Options)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := v.(*runcoptions.Options)
		if !ok || c.Runtime.Name != tc.name || o.SystemdCgroup != tc.systemd || o.BinaryName != tc.binary {
			t.Errorf("handler %q below %q: runtime %s options %v", tc.h.Name, tc.parent, c.Runtime.Name, v)
		}
	}
	if !custom.runc.SystemdCgroup {
		t.Error("the handler's own options were changed")
	}
}

// Lookups: the handlers containerd gave, an unsupported one refused with
// its reason.
func TestRuntimeHandlerLookup(t *testing.T) {
	table, err := ParseCRIHandlers(criTestConfig(t), criFeatures, true)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{}
	r.handlers.byName = table
	if h, err := r.RuntimeHandler(context.Background(), "crun"); err != nil || h.Name != "crun" {
		t.Errorf("crun: %v, %v", h, err)
	}
	if h, err := r.RuntimeHandler(context.Background(), DefaultHandler); err != nil || h.Type != "io.containerd.runc.v2" {
		t.Errorf("default: %v, %v", h, err)
	}
	var unknown *UnknownHandlerError
	if _, err := r.RuntimeHandler(context.Background(), "runsc"); err == nil || errors.As(err, &unknown) || !strings.Contains(err.Error(), "io.containerd.runsc.v1") {
		t.Errorf("runsc: %v", err)
	}
}

// Without containerd's CRI plugin the default runtime is all there is.
func TestDefaultHandlers(t *testing.T) {
	table := defaultHandlers(true, false)
	if len(table) != 2 || table[DefaultHandler] == nil || table["runc"] == nil {
		t.Fatalf("table %v", table)
	}
	for name, h := range table {
		if h.Name != name || h.Type != "io.containerd.runc.v2" || h.Unsupported != "" || !h.UserNamespaces || h.runc == nil {
			t.Errorf("%q: %+v", name, h)
		}
	}
}
