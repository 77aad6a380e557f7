package main

import (
	"time"

	log "github.com/sirupsen/logrus"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

// jsonLogFormat names the kubelet's "json" logging.format in
// component-base's registry, so the kubelet's validation of
// logging.format takes it (with its LoggingBetaOptions gate) and refuses
// others with its message. hostlet logs through logrus (setLogFormat):
// the registry's logger is never asked for.
type jsonLogFormat struct{}

// jsonFormat is the kubelet's name of its JSON format.
const jsonFormat = "json"

func (jsonLogFormat) Create(logsapi.LoggingConfiguration, logsapi.LoggingOptions) (klog.Logger, logsapi.RuntimeControl) {
	return klog.Background(), logsapi.RuntimeControl{}
}

func init() {
	if err := logsapi.RegisterLogFormat(jsonFormat, jsonLogFormat{}, logsapi.LoggingBetaOptions); err != nil {
		panic(err)
	}
}

// setLogFormat has hostlet's log written as logging.format says: "json"
// one JSON object a line, logrus's JSON formatter with the kubelet's keys
// where they map ("ts", "msg", "err" for an error; "level" stays, the
// kubelet's "v" being a verbosity); "text" (the default) logrus's text.
func setLogFormat(format string) {
	if format != jsonFormat {
		return
	}
	log.ErrorKey = "err"
	log.SetFormatter(&log.JSONFormatter{
		TimestampFormat: time.RFC3339Nano,
		FieldMap:        log.FieldMap{log.FieldKeyTime: "ts", log.FieldKeyMsg: "msg"},
	})
}
