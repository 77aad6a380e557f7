package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/provider/grpcsock"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// watch is the kubelet's plugin watcher over the registry dir: every
// socket that appears is asked for its GetInfo; a DRA driver offering the
// v1 DRAPlugin service is registered and told so. A socket that goes away
// takes its driver with it.
func (m *Manager) watch(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.RegistryDir, 0o750); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(m.cfg.RegistryDir); err != nil {
		w.Close()
		return err
	}
	entries, err := os.ReadDir(m.cfg.RegistryDir)
	if err != nil {
		w.Close()
		return err
	}
	for _, e := range entries {
		go m.register(ctx, filepath.Join(m.cfg.RegistryDir, e.Name()))
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				switch {
				case ev.Op&fsnotify.Create != 0:
					go m.register(ctx, ev.Name)
				case ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
					m.deregister(ev.Name)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.WithError(err).Warn("dra: watching the plugin registry")
			}
		}
	}()
	return nil
}

// register runs the plugin registration handshake with one socket.
func (m *Manager) register(ctx context.Context, socket string) {
	// The handshake is with a driver pod: its answers must not take the
	// node down.
	defer crash.Recover(log.WithField("socket", socket), nil)
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	l := log.WithField("socket", socket)
	conn, err := grpcsock.Dial(socket)
	if err != nil {
		l.WithError(err).Warn("dra: plugin registration")
		return
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := client.GetInfo(ictx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		l.WithError(err).Warn("dra: plugin GetInfo")
		return
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: true}
	switch {
	case info.Type != registerapi.DRAPlugin:
		// CSI drivers register here too; hostlet has no CSI support.
		status = &registerapi.RegistrationStatus{Error: fmt.Sprintf("plugin type %q is not supported", info.Type)}
	case !slices.Contains(info.SupportedVersions, drapb.DRAPluginService):
		status = &registerapi.RegistrationStatus{Error: fmt.Sprintf("none of the versions %v is supported; want %s", info.SupportedVersions, drapb.DRAPluginService)}
	case !filepath.IsAbs(info.Endpoint):
		status = &registerapi.RegistrationStatus{Error: fmt.Sprintf("endpoint %q is not an absolute path", info.Endpoint)}
	}
	if status.PluginRegistered {
		m.mu.Lock()
		m.drivers[info.Name] = driver{endpoint: info.Endpoint, registration: socket}
		m.mu.Unlock()
		l.WithFields(log.Fields{"driver": info.Name, "endpoint": info.Endpoint}).Info("dra: driver registered")
		defer m.retryUnprepare(ctx)
	} else {
		l.WithField("driver", info.Name).Warn("dra: plugin refused: " + status.Error)
	}
	if _, err := client.NotifyRegistrationStatus(ictx, status); err != nil {
		l.WithError(err).Warn("dra: NotifyRegistrationStatus")
	}
}

func (m *Manager) deregister(socket string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, d := range m.drivers {
		if d.registration == socket {
			delete(m.drivers, name)
			log.WithField("driver", name).Info("dra: driver deregistered")
		}
	}
}
