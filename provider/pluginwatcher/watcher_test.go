package pluginwatcher

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlet/hostlet/provider/grpcsock"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// plugin is a plugin's registration socket: its GetInfo and the status
// the watcher tells it.
type plugin struct {
	registerapi.UnimplementedRegistrationServer
	info   *registerapi.PluginInfo
	status chan *registerapi.RegistrationStatus
}

func (p *plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

func (p *plugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.status <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

type handler struct {
	mu           sync.Mutex
	refuse       error
	registered   chan Plugin
	deregistered chan Plugin
}

func (h *handler) Register(_ context.Context, p Plugin) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse != nil {
		return h.refuse
	}
	h.registered <- p
	return nil
}

func (h *handler) Deregister(p Plugin) { h.deregistered <- p }

func serve(t *testing.T, ctx context.Context, socket string, p *plugin) {
	t.Helper()
	if err := grpcsock.Serve(ctx, socket, "plugin", func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, p) }); err != nil {
		t.Fatal(err)
	}
}

// A plugin of a handled type is handed to its handler and told it is
// registered, and deregistered when its socket goes; a plugin of another
// type, or one its handler refuses, is told why.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	csi := &handler{registered: make(chan Plugin, 1), deregistered: make(chan Plugin, 1)}
	dra := &handler{refuse: errors.New("no such version")}
	w := New(dir, map[string]Handler{registerapi.CSIPlugin: csi, registerapi.DRAPlugin: dra})
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	w.clock = fc
	// One socket is there before the watcher starts, as after a restart.
	early := &plugin{info: &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "csi.example.com", Endpoint: "/csi.sock",
		SupportedVersions: []string{"1.0.0"}}, status: make(chan *registerapi.RegistrationStatus, 1)}
	earlySocket := filepath.Join(dir, "csi-reg.sock")
	serve(t, t.Context(), earlySocket, early)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := <-early.status; !s.PluginRegistered {
		t.Errorf("csi plugin: %+v", s)
	}
	if p := <-csi.registered; p.Name != "csi.example.com" || p.Socket != earlySocket || p.Endpoint != "/csi.sock" {
		t.Errorf("registered %+v", p)
	}
	for _, c := range []struct{ typ, want string }{
		{registerapi.DRAPlugin, "no such version"},
		{registerapi.DevicePlugin, `plugin type "DevicePlugin" is not supported`},
	} {
		p := &plugin{info: &registerapi.PluginInfo{Type: c.typ, Name: "x"}, status: make(chan *registerapi.RegistrationStatus, 1)}
		serve(t, t.Context(), filepath.Join(dir, c.typ+".sock"), p)
		if s := <-p.status; s.PluginRegistered || s.Error != c.want {
			t.Errorf("%s: %+v, want %q", c.typ, s, c.want)
		}
	}
	if err := os.Remove(earlySocket); err != nil {
		t.Fatal(err)
	}
	if p := <-csi.deregistered; p.Name != "csi.example.com" {
		t.Errorf("deregistered %+v", p)
	}
}

// A plugin its handler refuses is tried again, with back-off, while its
// socket is there, and registered once the handler accepts it.
func TestWatcherRetries(t *testing.T) {
	dir := t.TempDir()
	h := &handler{refuse: errors.New("no Node yet"), registered: make(chan Plugin, 1), deregistered: make(chan Plugin, 1)}
	w := New(dir, map[string]Handler{registerapi.CSIPlugin: h})
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	w.clock = fc
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := &plugin{info: &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "csi.example.com"}, status: make(chan *registerapi.RegistrationStatus, 1)}
	serve(t, t.Context(), filepath.Join(dir, "csi-reg.sock"), p)
	if s := <-p.status; s.PluginRegistered || s.Error != "no Node yet" {
		t.Fatalf("first try: %+v", s)
	}
	h.mu.Lock()
	h.refuse = nil
	h.mu.Unlock()
	for !fc.HasWaiters() {
		runtime.Gosched()
	}
	fc.Step(time.Second)
	if s := <-p.status; !s.PluginRegistered {
		t.Errorf("second try: %+v", s)
	}
	if got := <-h.registered; got.Name != "csi.example.com" {
		t.Errorf("registered %+v", got)
	}
}

// List reads each registration socket's GetInfo without telling it
// anything; a socket nobody listens on is an error naming it, and the
// others are still listed.
func TestList(t *testing.T) {
	dir := t.TempDir()
	p := &plugin{info: &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "csi.example.com", Endpoint: "/csi.sock",
		SupportedVersions: []string{"1.0.0"}}, status: make(chan *registerapi.RegistrationStatus, 1)}
	socket := filepath.Join(dir, "csi-reg.sock")
	serve(t, t.Context(), socket, p)
	// A driver stopped without removing its socket.
	stale := filepath.Join(dir, "stale-reg.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, "not-a-socket"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	plugins, err := List(t.Context(), dir)
	if err == nil || !strings.Contains(err.Error(), stale) {
		t.Errorf("List's error: %v", err)
	}
	if len(plugins) != 1 || plugins[0].Name != "csi.example.com" || plugins[0].Endpoint != "/csi.sock" || plugins[0].Socket != socket {
		t.Errorf("List: %+v", plugins)
	}
	select {
	case s := <-p.status:
		t.Errorf("List told the plugin %v", s)
	default:
	}
	if plugins, err := List(t.Context(), filepath.Join(dir, "none")); err != nil || len(plugins) != 0 {
		t.Errorf("no registry dir: %v %v", plugins, err)
	}
}
