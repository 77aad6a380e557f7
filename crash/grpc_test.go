package crash

import (
	"context"
	"testing"

	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnaryServerInterceptorRecovers(t *testing.T) {
	i := UnaryServerInterceptor(log.NewEntry(log.StandardLogger()))
	_, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(context.Context, any) (any, error) {
		panic("boom")
	})
	if status.Code(err) != codes.Internal {
		t.Fatalf("err = %v, want Internal", err)
	}
	resp, err := i(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(context.Context, any) (any, error) {
		return "ok", nil
	})
	if resp != "ok" || err != nil {
		t.Fatalf("passing call: %v %v", resp, err)
	}
}
