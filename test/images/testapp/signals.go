package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// terminating are the signals that end testapp (after --term-delay).
var terminating = map[syscall.Signal]bool{
	syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGQUIT: true,
	syscall.SIGHUP: true, syscall.SIGUSR1: true, syscall.SIGUSR2: true,
}

func trapSignals(cfg *config) {
	ch := make(chan os.Signal, 16)
	if cfg.signals {
		signal.Notify(ch) // all of them, to log what a runtime sends
	} else {
		for s := range terminating {
			signal.Notify(ch, s)
		}
	}
	go func() {
		exiting := false
		for s := range ch {
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGURG { // SIGURG is Go's own preemption noise
				continue
			}
			if cfg.signals {
				logf("signal: %s", signalName(sig))
			}
			if !terminating[sig] || exiting || (sig == syscall.SIGTERM && cfg.ignoreTerm) {
				continue
			}
			// Keep reading (and logging) signals while the delay runs.
			exiting = true
			time.AfterFunc(cfg.termDelay, func() { exit(cfg.termExitCode) })
		}
	}()
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}
