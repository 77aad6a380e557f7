package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hostlet/hostlet/provider/grpcsock"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registration is the kubelet's Registration service on
// <dir>/kubelet.sock, where plugins announce their resource and socket.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager
}

// serve clears the stale sockets of plugins from before (plugins watch for
// kubelet.sock to be created again and then re-register) and serves the
// Registration service until ctx ends.
func (m *Manager) serve(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.Dir, 0o750); err != nil {
		return err
	}
	if err := removeSockets(m.cfg.Dir); err != nil {
		return err
	}
	return grpcsock.Serve(ctx, filepath.Join(m.cfg.Dir, "kubelet.sock"), "device plugin registration", func(srv *grpc.Server) {
		pluginapi.RegisterRegistrationServer(srv, &registration{m: m})
	})
}

// removeSockets removes every socket in dir (the kubelet's cleanup of its
// device plugin dir); files and directories stay.
func removeSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	l := log.WithFields(log.Fields{"resource": req.ResourceName, "endpoint": req.Endpoint})
	if !slices.Contains(pluginapi.SupportedVersions[:], req.Version) {
		err := fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", req.Version, pluginapi.SupportedVersions)
		l.WithError(err).Warn("devices: registration refused")
		return &pluginapi.Empty{}, err
	}
	if !isExtendedResourceName(req.ResourceName) {
		err := fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
		l.WithError(err).Warn("devices: registration refused")
		return &pluginapi.Empty{}, err
	}
	// The endpoint is a name in the plugin dir, never a path elsewhere.
	if req.Endpoint == "" || filepath.Base(req.Endpoint) != req.Endpoint {
		err := fmt.Errorf("invalid endpoint %q", req.Endpoint)
		l.WithError(err).Warn("devices: registration refused")
		return &pluginapi.Empty{}, err
	}
	// The plugin answers on its socket while this call is still open.
	e, err := dial(r.m.ctx, req.ResourceName, filepath.Join(r.m.cfg.Dir, req.Endpoint))
	if err != nil {
		l.WithError(err).Warn("devices: connecting to the plugin")
		return &pluginapi.Empty{}, err
	}
	r.m.connect(e)
	l.WithFields(log.Fields{"preStartRequired": e.opts.PreStartRequired, "preferredAllocation": e.opts.GetPreferredAllocationAvailable}).
		Info("devices: plugin registered")
	return &pluginapi.Empty{}, nil
}

// isExtendedResourceName is the API's rule for a resource a plugin may
// advertise: a qualified name outside kubernetes.io, not requests.*.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}
