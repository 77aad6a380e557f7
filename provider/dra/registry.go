package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/hostlet/hostlet/provider/pluginwatcher"
	log "github.com/sirupsen/logrus"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Register is the plugin watcher's handler of DRA plugins
// (provider/pluginwatcher): a driver offering the v1 DRAPlugin service on
// an absolute endpoint is registered; pods' claims whose unprepare waited
// for a driver are tried again.
func (m *Manager) Register(ctx context.Context, p pluginwatcher.Plugin) error {
	switch {
	case !slices.Contains(p.Versions, drapb.DRAPluginService):
		return fmt.Errorf("none of the versions %v is supported; want %s", p.Versions, drapb.DRAPluginService)
	case !filepath.IsAbs(p.Endpoint):
		return fmt.Errorf("endpoint %q is not an absolute path", p.Endpoint)
	}
	m.mu.Lock()
	m.drivers[p.Name] = driver{endpoint: p.Endpoint, registration: p.Socket}
	m.mu.Unlock()
	log.WithFields(log.Fields{"driver": p.Name, "endpoint": p.Endpoint}).Info("dra: driver registered")
	go m.retryUnprepare(context.WithoutCancel(ctx))
	return nil
}

// Deregister forgets the driver whose registration socket went away.
func (m *Manager) Deregister(p pluginwatcher.Plugin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.drivers[p.Name]; ok && d.registration == p.Socket {
		delete(m.drivers, p.Name)
		log.WithField("driver", p.Name).Info("dra: driver deregistered")
	}
}
