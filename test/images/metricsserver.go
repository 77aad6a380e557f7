package images

import (
	"context"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// MetricsServerRef is the metrics-server image BuildMetricsServer makes.
const MetricsServerRef = "hostlet.local/metrics-server:v1"

// BuildMetricsServer builds the metrics-server image into outDir: the
// busybox base and the static metrics-server binary (test/cluster/build.sh
// metrics-server) at /metrics-server, its entrypoint as in the upstream
// image. Reused while its inputs are unchanged.
func BuildMetricsServer(ctx context.Context, outDir, metricsServer string) (Image, error) {
	return busyboxWithBinary(ctx, outDir, MetricsServerRef, metricsServer, "metrics-server", ocispec.ImageConfig{
		Env:          []string{"PATH=" + defaultPath},
		Entrypoint:   []string{"/metrics-server"},
		ExposedPorts: map[string]struct{}{"10250/tcp": {}},
	})
}
