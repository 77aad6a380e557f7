package health

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
)

// Notifier sends a state to the service manager (sd_notify): ok is false
// when there is none to tell (no NOTIFY_SOCKET).
type Notifier interface {
	Notify(state string) (ok bool, err error)
}

// Systemd is the service manager of the unit hostlet runs in, if any:
// go-systemd's daemon package, the environment left in place as the
// kubelet leaves it.
type Systemd struct{}

func (Systemd) Notify(state string) (bool, error) { return daemon.SdNotify(false, state) }

// WatchdogInterval is how often to ping systemd's watchdog: half its
// WatchdogSec (WATCHDOG_USEC, for this process), as the kubelet's; 0 when
// the unit has no watchdog. A watchdog of a second or less is refused, as
// by the kubelet: no ping could be sure to make it.
func WatchdogInterval() (time.Duration, error) {
	timeout, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("configure watchdog: %w", err)
	}
	if timeout == 0 {
		return 0, nil
	}
	if timeout <= time.Second {
		return 0, fmt.Errorf("configure watchdog timeout too small: %v", timeout)
	}
	return timeout / 2, nil
}

// Watchdog pings n's watchdog (WATCHDOG=1) now and every interval until
// ctx ends, only while healthy says nil: a hostlet whose checks fail stops
// pinging, and systemd restarts it once WatchdogSec passes without one
// (the kubelet's watchdog, pkg/kubelet/watchdog).
func Watchdog(ctx context.Context, clk clock.WithTicker, n Notifier, interval time.Duration, healthy func() error) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		if err := healthy(); err != nil {
			// Each time, as the kubelet's: the log says when the pings
			// stopped and why.
			log.WithError(err).Error("not pinging systemd's watchdog this time: hostlet is not healthy")
		} else {
			if ok, err := n.Notify(daemon.SdNotifyWatchdog); err != nil || !ok {
				log.WithError(err).WithField("acknowledged", ok).Warn("failed to notify systemd's watchdog")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
