package runtime

import (
	"context"
	"fmt"
	"os"

	"github.com/fsnotify/fsnotify"
	log "github.com/sirupsen/logrus"
)

// Watch reloads the network config on every change in the config directory
// (a file created, written, renamed or removed), as containerd's CRI does, and
// calls onChange when the loaded network changes (also for SetPodCIDRs), so
// the node's Ready condition follows at once. It runs until ctx ends or the
// directory itself goes away.
func (n *Network) Watch(ctx context.Context, onChange func()) error {
	if err := os.MkdirAll(n.confDir, 0o755); err != nil {
		return fmt.Errorf("creating CNI config dir: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching CNI config dir: %w", err)
	}
	defer w.Close()
	if err := w.Add(n.confDir); err != nil {
		return fmt.Errorf("watching CNI config dir %s: %w", n.confDir, err)
	}
	n.mu.Lock()
	n.onChange, n.watching = onChange, true
	n.mu.Unlock()
	defer func() {
		// Unwatched, Status reloads at every check instead.
		n.mu.Lock()
		n.onChange, n.watching = nil, false
		n.mu.Unlock()
	}()
	// A config written between NewNetwork and the watch is caught here.
	n.reload("watch started")
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if ev.Name == n.confDir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				n.reload(ev.Op.String() + " " + ev.Name)
				return fmt.Errorf("CNI config dir %s was removed", n.confDir)
			}
			n.reload(ev.Op.String() + " " + ev.Name)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.WithError(err).Warn("CNI: watching the config dir")
		}
	}
}
