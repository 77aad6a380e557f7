package main

import (
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
)

// vkLogger routes the log of virtual-kubelet's node controller into
// hostlet's. Its info lines go to debug; warnings and errors that are
// expected answers (a status patch that raced another writer) go to debug
// too, so the default log keeps only what needs an operator.
// (virtual-kubelet's own log/logrus adapter passes every level through
// unchanged.)
type vkLogger struct{ e *logrus.Entry }

var _ vklog.Logger = vkLogger{}

// expected are fragments of virtual-kubelet messages that describe normal
// events, not failures.
var expected = []string{
	"the object has been modified",
}

func isExpected(msg string) bool {
	for _, s := range expected {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (l vkLogger) text(args []any) string { return fmt.Sprint(args...) }

func (l vkLogger) errText() string {
	if err, ok := l.e.Data[logrus.ErrorKey].(error); ok {
		return err.Error()
	}
	return ""
}

func (l vkLogger) problem(level logrus.Level, msg string) {
	if isExpected(msg) || isExpected(l.errText()) {
		level = logrus.DebugLevel
	}
	l.e.Log(level, msg)
}

func (l vkLogger) Debug(args ...any)            { l.e.Debug(args...) }
func (l vkLogger) Debugf(f string, args ...any) { l.e.Debugf(f, args...) }
func (l vkLogger) Info(args ...any)             { l.e.Debug(args...) }
func (l vkLogger) Infof(f string, args ...any)  { l.e.Debugf(f, args...) }
func (l vkLogger) Warn(args ...any)             { l.problem(logrus.WarnLevel, l.text(args)) }
func (l vkLogger) Warnf(f string, args ...any)  { l.problem(logrus.WarnLevel, fmt.Sprintf(f, args...)) }
func (l vkLogger) Error(args ...any)            { l.problem(logrus.ErrorLevel, l.text(args)) }
func (l vkLogger) Errorf(f string, args ...any) {
	l.problem(logrus.ErrorLevel, fmt.Sprintf(f, args...))
}
func (l vkLogger) Fatal(args ...any)                      { l.e.Fatal(args...) }
func (l vkLogger) Fatalf(f string, args ...any)           { l.e.Fatalf(f, args...) }
func (l vkLogger) WithField(k string, v any) vklog.Logger { return vkLogger{l.e.WithField(k, v)} }
func (l vkLogger) WithFields(f vklog.Fields) vklog.Logger {
	return vkLogger{l.e.WithFields(logrus.Fields(f))}
}
func (l vkLogger) WithError(err error) vklog.Logger { return vkLogger{l.e.WithError(err)} }
