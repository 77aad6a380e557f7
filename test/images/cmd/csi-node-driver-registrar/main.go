// Command csi-node-driver-registrar is a STAND-IN for upstream's
// registry.k8s.io/sig-storage/csi-node-driver-registrar, whose module the
// Go proxy does not serve. It does what upstream documents: ask the
// driver's CSI socket (--csi-address) for its name (GetPluginInfo), serve
// the kubelet's plugin registration API
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on
// <--plugin-registration-path>/<name>-reg.sock, answer GetInfo with the
// driver's socket as the node sees it (--kubelet-registration-path), and
// exit when the node says the registration failed (the container restarts
// and registers again). The conformance run (test/conformance
// -csi-hostpath) puts it into an image of the upstream name.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func main() {
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the driver's CSI socket in this container")
	kubeletPath := flag.String("kubelet-registration-path", "", "the driver's CSI socket as the node sees it")
	regDir := flag.String("plugin-registration-path", "/registration", "the node's plugins_registry in this container")
	timeout := flag.Duration("timeout", time.Second, "the timeout of each call to the driver")
	// Upstream's other flags, accepted so a deployment runs unchanged.
	for _, name := range []string{"v", "health-port", "http-endpoint", "mode", "enable-pprof", "log-format"} {
		flag.String(name, "", "accepted for upstream's node-driver-registrar, ignored")
	}
	flag.Parse()
	if *kubeletPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	name, err := driverName(ctx, *csiAddress, *timeout)
	if err != nil {
		log.Fatal(err)
	}
	socket := filepath.Join(*regDir, name+"-reg.sock")
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		log.Fatal(err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, registrar{name: name, endpoint: *kubeletPath})
	go func() {
		<-ctx.Done()
		srv.Stop()
		os.Remove(socket)
	}()
	log.Printf("node-driver-registrar stand-in: driver %s (endpoint %s) on %s", name, *kubeletPath, socket)
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}

// driverName waits for the driver's socket to answer GetPluginInfo, as
// upstream does before it registers.
func driverName(ctx context.Context, address string, timeout time.Duration) (string, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	id := csipb.NewIdentityClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		info, err := id.GetPluginInfo(cctx, &csipb.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			return info.Name, nil
		}
		log.Printf("waiting for the driver at %s: %v", address, err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("driver at %s: %w", address, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (r registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		// Upstream exits so that the container restarts and registers
		// again.
		log.Printf("registration failed: %s; exiting", s.Error)
		os.Exit(1)
	}
	log.Printf("registered with the node")
	return &registerapi.RegistrationStatusResponse{}, nil
}
