// Package crash keeps a panic in one goroutine from taking the node agent
// down with it: every goroutine that works for a pod, a probe, a hook, an
// event stream or an API request defers Recover, so a bug costs that unit of
// work (which reports it and is retried) and not every pod's supervision.
//
// It does what k8s.io/apimachinery/pkg/util/runtime.HandleCrash does, minus
// the re-panic HandleCrash does by default.
package crash

import (
	"fmt"
	"net/http"
	"runtime/debug"

	log "github.com/sirupsen/logrus"
)

// Recover must be deferred directly (defer crash.Recover(l, report)). When
// the goroutine panics it logs the value and stack with l's fields (pod
// namespace/name/uid where the caller has them) and calls report, if set,
// with a one-line message, so the caller can put it on the pod and retry.
// http.ErrAbortHandler is passed on: it is net/http's way to abort a
// response, not a bug.
func Recover(l *log.Entry, report func(msg string)) {
	Handle(recover(), l, report)
}

// Handle does what Recover does with a value the caller recovered itself,
// for deferred functions that wrap Recover (recover works only when called
// directly by the deferred function).
func Handle(r any, l *log.Entry, report func(msg string)) {
	if r == nil {
		return
	}
	if r == http.ErrAbortHandler {
		panic(r)
	}
	if l == nil {
		l = log.NewEntry(log.StandardLogger())
	}
	msg := fmt.Sprint(r)
	l.WithField("panic", msg).WithField("stack", string(debug.Stack())).Error("recovered from panic")
	if report != nil {
		// A panicking report must not undo the recovery.
		defer func() {
			if r2 := recover(); r2 != nil {
				l.WithField("panic", fmt.Sprint(r2)).Error("panic while reporting a panic")
			}
		}()
		report(msg)
	}
}

// Go runs f in a new goroutine that recovers from a panic as Recover does.
func Go(l *log.Entry, report func(msg string), f func()) {
	go func() {
		defer Recover(l, report)
		f()
	}()
}
