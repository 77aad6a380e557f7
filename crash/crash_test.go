package crash

import (
	"net/http"
	"testing"

	log "github.com/sirupsen/logrus"
)

func TestRecoverReports(t *testing.T) {
	var got string
	func() {
		defer Recover(log.WithField("pod", "ns/p"), func(msg string) { got = msg })
		panic("boom")
	}()
	if got != "boom" {
		t.Fatalf("report got %q, want boom", got)
	}
	// A nil report and a panicking report are both survived.
	func() {
		defer Recover(nil, nil)
		panic("x")
	}()
	func() {
		defer Recover(nil, func(string) { panic("again") })
		panic("x")
	}()
}

func TestRecoverPassesAbortHandler(t *testing.T) {
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	func() {
		defer Recover(nil, nil)
		panic(http.ErrAbortHandler)
	}()
}

func TestGo(t *testing.T) {
	done := make(chan string)
	Go(nil, func(msg string) { done <- msg }, func() { panic("in goroutine") })
	if msg := <-done; msg != "in goroutine" {
		t.Fatal(msg)
	}
}
