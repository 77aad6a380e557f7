package devices

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// testPlugin is a device plugin speaking the real protocol over a unix
// socket, with the options the upstream sample plugin leaves off:
// GetPreferredAllocation and PreStartContainer.
type testPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	lists    chan []*pluginapi.Device
	mu       sync.Mutex
	preStart [][]string
}

func (p *testPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}, nil
}

func (p *testPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		select {
		case devs := <-p.lists:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *testPlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	// Prefers the highest IDs.
	ids := slices.Clone(r.ContainerRequests[0].AvailableDeviceIDs)
	slices.Sort(ids)
	slices.Reverse(ids)
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{
		{DeviceIDs: ids[:r.ContainerRequests[0].AllocationSize]},
	}}, nil
}

func (p *testPlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:       map[string]string{"TEST_DEVICES": strings.Join(c.DevicesIds, ",")},
			CdiDevices: []*pluginapi.CDIDevice{{Name: "example.com/resource=" + c.DevicesIds[0]}},
		})
	}
	return out, nil
}

func (p *testPlugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.preStart = append(p.preStart, r.DevicesIds)
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}

// A plugin registers on kubelet.sock; its list sets capacity and
// allocatable; admission takes its preferred devices; the container gets
// its answer after PreStartContainer; a device turning unhealthy and the
// plugin going away show at once.
func TestRegistrationAndAllocation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	m, err := New(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	if err := m.Start(ctx, func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	waitCounts := func(capacity, allocatable int64) {
		t.Helper()
		for {
			if c, a, _ := counts(t, m); c == capacity && a == allocatable {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				c, a, _ := counts(t, m)
				t.Fatalf("capacity %d allocatable %d, want %d %d", c, a, capacity, allocatable)
			}
		}
	}

	plugin := &testPlugin{lists: make(chan []*pluginapi.Device, 4)}
	ln, err := net.Listen("unix", filepath.Join(dir, "test.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, plugin)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	plugin.lists <- []*pluginapi.Device{{ID: "a", Health: pluginapi.Healthy}, {ID: "b", Health: pluginapi.Healthy}, {ID: "c", Health: pluginapi.Healthy}}

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := pluginapi.NewRegistrationClient(conn)
	if _, err := reg.Register(ctx, &pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "test.sock", ResourceName: res}); err == nil {
		t.Error("an unsupported version was registered")
	}
	if _, err := reg.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "test.sock", ResourceName: "cpu"}); err == nil {
		t.Error("a native resource name was registered")
	}
	if _, err := reg.Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "test.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	waitCounts(3, 3)

	pod := devicePod("p1", "c", 2)
	if err := m.Allocate(pod); err != nil {
		t.Fatal(err)
	}
	if got := m.Assigned("p1", "c")[res]; !slices.Equal(got, []string{"c", "b"}) {
		t.Errorf("assigned %v, want the plugin's preferred [c b]", got)
	}
	resps, err := m.ContainerAllocations(ctx, pod, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 1 || resps[0].Envs["TEST_DEVICES"] != "c,b" || resps[0].CdiDevices[0].Name != "example.com/resource=c" {
		t.Errorf("container allocations: %v", resps)
	}
	plugin.mu.Lock()
	if len(plugin.preStart) != 1 || !slices.Equal(plugin.preStart[0], []string{"c", "b"}) {
		t.Errorf("PreStartContainer calls: %v", plugin.preStart)
	}
	plugin.mu.Unlock()
	if _, err := m.ContainerAllocations(ctx, &v1.Pod{}, "none"); err != nil {
		t.Errorf("a container without devices: %v", err)
	}

	plugin.lists <- []*pluginapi.Device{{ID: "a", Health: pluginapi.Unhealthy}, {ID: "b", Health: pluginapi.Healthy}, {ID: "c", Health: pluginapi.Healthy}}
	waitCounts(3, 2)
	if err := m.Allocate(devicePod("p2", "c", 1)); err == nil {
		t.Error("a device held or unhealthy was allocated")
	}
	srv.Stop()
	waitCounts(3, 0)
}
