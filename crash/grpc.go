package crash

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor recovers a panic in a gRPC handler of the node's
// local APIs (device plugin registration, pod resources): grpc-go does not,
// and their callers are pods (plugins, monitoring agents), whose requests
// must not take the node down. The call fails with Internal.
func UnaryServerInterceptor(l *log.Entry) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				Handle(r, l.WithField("method", info.FullMethod), nil)
				err = status.Error(codes.Internal, fmt.Sprint("panic: ", r))
			}
		}()
		return handler(ctx, req)
	}
}
