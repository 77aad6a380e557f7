package main

import (
	log "github.com/sirupsen/logrus"
)

// cleanups undoes the run's changes to the machine in reverse order of
// making them, whatever happened in between: every step is attempted, and
// failures are logged, not fatal.
type cleanups []struct {
	what string
	fn   func() error
}

func (c *cleanups) add(what string, fn func() error) {
	*c = append(*c, struct {
		what string
		fn   func() error
	}{what, fn})
}

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		step := (*c)[i]
		log.Debugf("cleanup: %s", step.what)
		if err := step.fn(); err != nil {
			log.Warnf("cleanup: %s: %v", step.what, err)
		}
	}
	*c = nil
}
