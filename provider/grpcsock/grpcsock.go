// Package grpcsock serves and dials the node's local gRPC APIs on unix
// sockets: the device plugin Registration service and the pod resources API
// it serves, the device plugins, DRA and CSI drivers it calls.
package grpcsock

import (
	"context"
	"net"
	"os"
	"path/filepath"

	"github.com/hostlet/hostlet/crash"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Serve listens on socket (a stale one left from before is replaced),
// registers the services on a new server and serves until ctx ends. A panic
// in a handler fails that call only: the callers are pods. name is the
// server's in the log.
func Serve(ctx context.Context, socket, name string, register func(*grpc.Server)) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return err
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return err
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	l := log.WithField("server", name)
	srv := grpc.NewServer(grpc.UnaryInterceptor(crash.UnaryServerInterceptor(l)))
	register(srv)
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil {
			l.WithError(err).Error("gRPC server stopped")
		}
	}()
	return nil
}

// Dial connects to a plugin's socket; the connection is made on the first
// call.
func Dial(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}
