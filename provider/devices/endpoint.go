package devices

import (
	"context"
	"fmt"
	"time"

	"github.com/hostlet/hostlet/provider/grpcsock"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rpcTimeout bounds the calls made during admission, which holds up the
// node's other admissions; PreStartContainer has the API's own timeout.
const rpcTimeout = 30 * time.Second

// endpoint is the connection to one registered plugin, serving one
// resource.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	cancel   context.CancelFunc
}

// dial connects to a plugin's socket and reads its options, as the kubelet
// does while the plugin's Register call is still open.
func dial(ctx context.Context, resource, socket string) (*endpoint, error) {
	conn, err := grpcsock.Dial(socket)
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts, err := client.GetDevicePluginOptions(octx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options: %v", err)
	}
	return &endpoint{resource: resource, socket: socket, conn: conn, client: client, opts: opts}, nil
}

// run streams ListAndWatch into update until the plugin goes away or the
// endpoint is stopped.
func (e *endpoint) run(ctx context.Context, update func([]*pluginapi.Device)) {
	stream, err := e.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		log.WithError(err).WithField("resource", e.resource).Warn("devices: ListAndWatch failed")
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				log.WithError(err).WithField("resource", e.resource).Info("devices: ListAndWatch ended")
			}
			return
		}
		update(resp.Devices)
	}
}

func (e *endpoint) stop() {
	if e.cancel != nil {
		e.cancel()
	}
	if e.conn != nil {
		e.conn.Close()
	}
}

func (e *endpoint) allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) == 0 {
		return nil, fmt.Errorf("no containers return in allocation response %v", resp)
	}
	return resp.ContainerResponses[0], nil
}

// preferred asks the plugin which devices it would rather give, when it
// offers GetPreferredAllocation; nil otherwise.
func (e *endpoint) preferred(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	if !e.opts.GetGetPreferredAllocationAvailable() {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
	}
	if len(resp.ContainerResponses) == 0 {
		return nil, nil
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

// preStart tells the plugin a container with these devices is about to
// start, when it asked to be told.
func (e *endpoint) preStart(ctx context.Context, ids []string) error {
	if !e.opts.GetPreStartRequired() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	if _, err := e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v", err)
	}
	return nil
}
