package server

import (
	"context"
	"net/http"
	"strings"
)

type zeroTailKey struct{}

// withZeroTail marks log requests with tailLines=0: virtual-kubelet's
// ContainerLogOpts cannot tell them from "all lines", the kubelet sends none.
func withZeroTail(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/containerLogs/") && r.URL.Query().Get("tailLines") == "0" {
			r = r.WithContext(context.WithValue(r.Context(), zeroTailKey{}, true))
		}
		next.ServeHTTP(w, r)
	})
}

func zeroTail(ctx context.Context) bool {
	v, _ := ctx.Value(zeroTailKey{}).(bool)
	return v
}
