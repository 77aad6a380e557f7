// Package pluginwatcher is the kubelet's plugin watcher
// (pkg/kubelet/pluginmanager): every socket that appears in
// <root-dir>/plugins_registry is asked for its GetInfo, handed to the
// handler of its type (DRA and CSI drivers register the same way) and told
// the outcome; a socket that goes away takes its plugin with it.
package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hostlet/hostlet/crash"
	"github.com/hostlet/hostlet/provider/grpcsock"
	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// Plugin is what a plugin said of itself through GetInfo, and its
// registration socket.
type Plugin struct {
	Type     string
	Name     string
	Endpoint string
	Versions []string
	// Socket is its registration socket in the registry dir.
	Socket string
}

// Handler registers the plugins of one type (the kubelet's
// PluginHandler): Register says why a plugin is refused, or nil;
// Deregister is called once its socket is gone.
type Handler interface {
	Register(ctx context.Context, p Plugin) error
	Deregister(p Plugin)
}

// Watcher watches one registry dir for the handlers' plugin types.
type Watcher struct {
	dir      string
	handlers map[string]Handler
	clock    clock.Clock

	mu      sync.Mutex
	plugins map[string]Plugin // registered, by socket
}

// New is a watcher of dir; handlers are by plugin type
// (registerapi.DRAPlugin, registerapi.CSIPlugin).
func New(dir string, handlers map[string]Handler) *Watcher {
	return &Watcher{dir: dir, handlers: handlers, clock: clock.RealClock{}, plugins: map[string]Plugin{}}
}

// Start registers the sockets there now and watches for more until ctx
// ends.
func (w *Watcher) Start(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, 0o750); err != nil {
		return err
	}
	// The kubelet fails the same way ("failed to start plugin
	// fsWatcher"); the reason names the watcher, as a bare EMFILE from
	// inotify_init (fs.inotify.max_user_instances used up) reads like a
	// file descriptor limit.
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugin watcher: inotify for %s: %w", w.dir, err)
	}
	if err := fw.Add(w.dir); err != nil {
		fw.Close()
		return fmt.Errorf("plugin watcher: watching %s: %w", w.dir, err)
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		fw.Close()
		return err
	}
	for _, e := range entries {
		go w.register(ctx, filepath.Join(w.dir, e.Name()))
	}
	go func() {
		defer fw.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				switch {
				case ev.Op&fsnotify.Create != 0:
					go w.register(ctx, ev.Name)
				case ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
					w.deregister(ev.Name)
				}
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				log.WithError(err).Warn("pluginwatcher: watching the plugin registry")
			}
		}
	}()
	return nil
}

// retryMax caps the back-off between registration attempts.
const retryMax = time.Minute

// register runs the plugin registration handshake with one socket until
// it succeeds, the socket goes or ctx ends: as the kubelet's plugin
// manager keeps trying a plugin whose socket is there, a driver that
// registers before the Node exists (its CSINode cannot be written yet) or
// while its handler fails is registered later, not never.
func (w *Watcher) register(ctx context.Context, socket string) {
	// The handshake is with a driver pod: its answers must not take the
	// node down.
	defer crash.Recover(log.WithField("socket", socket), nil)
	delay := time.Second
	for {
		if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return
		}
		w.mu.Lock()
		_, done := w.plugins[socket]
		w.mu.Unlock()
		if done || w.try(ctx, socket) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(delay):
		}
		delay = min(2*delay, retryMax)
	}
}

// try is one registration handshake; ok says the plugin is registered.
func (w *Watcher) try(ctx context.Context, socket string) (ok bool) {
	l := log.WithField("socket", socket)
	conn, err := grpcsock.Dial(socket)
	if err != nil {
		l.WithError(err).Warn("pluginwatcher: plugin registration")
		return false
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := getInfo(ictx, client, socket, grpc.WaitForReady(true))
	if err != nil {
		l.WithError(err).Warn("pluginwatcher: plugin GetInfo")
		return false
	}
	l = l.WithFields(log.Fields{"type": p.Type, "plugin": p.Name, "endpoint": p.Endpoint})
	status := &registerapi.RegistrationStatus{PluginRegistered: true}
	h, ok := w.handlers[p.Type]
	if !ok {
		status = &registerapi.RegistrationStatus{Error: fmt.Sprintf("plugin type %q is not supported", p.Type)}
	} else if err := h.Register(ctx, p); err != nil {
		status = &registerapi.RegistrationStatus{Error: err.Error()}
	}
	if status.PluginRegistered {
		w.mu.Lock()
		w.plugins[socket] = p
		w.mu.Unlock()
		l.Info("pluginwatcher: plugin registered")
	} else {
		l.Warn("pluginwatcher: plugin refused: " + status.Error)
	}
	if _, err := client.NotifyRegistrationStatus(ictx, status); err != nil {
		l.WithError(err).Warn("pluginwatcher: NotifyRegistrationStatus")
	}
	return status.PluginRegistered
}

func (w *Watcher) deregister(socket string) {
	w.mu.Lock()
	p, ok := w.plugins[socket]
	delete(w.plugins, socket)
	w.mu.Unlock()
	if !ok {
		return
	}
	defer crash.Recover(log.WithField("socket", socket), nil)
	log.WithFields(log.Fields{"type": p.Type, "plugin": p.Name}).Info("pluginwatcher: plugin deregistered")
	w.handlers[p.Type].Deregister(p)
}

// getInfo is a plugin's answer to GetInfo.
func getInfo(ctx context.Context, client registerapi.RegistrationClient, socket string, opts ...grpc.CallOption) (Plugin, error) {
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{}, opts...)
	if err != nil {
		return Plugin{}, err
	}
	return Plugin{Type: info.Type, Name: info.Name, Endpoint: info.Endpoint, Versions: info.SupportedVersions, Socket: socket}, nil
}

// List asks each registration socket in dir for its GetInfo once, without
// registering it (no NotifyRegistrationStatus): `hostlet leave` finds the
// node's drivers this way, with hostlet stopped, to have them tear their
// volumes down. A socket that does not answer is an error naming it; the
// others are still listed.
func List(ctx context.Context, dir string) ([]Plugin, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var plugins []Plugin
	var errs []error
	for _, e := range entries {
		socket := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		p, err := listOne(ctx, socket)
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin registration socket %s: GetInfo: %w", socket, err))
			continue
		}
		plugins = append(plugins, p)
	}
	return plugins, errors.Join(errs...)
}

func listOne(ctx context.Context, socket string) (Plugin, error) {
	conn, err := grpcsock.Dial(socket)
	if err != nil {
		return Plugin{}, err
	}
	defer conn.Close()
	// Not WaitForReady's wait: a socket nobody listens on any more (a
	// driver stopped without removing it) fails at once.
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return getInfo(ictx, registerapi.NewRegistrationClient(conn), socket)
}
