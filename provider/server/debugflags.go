package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	"k8s.io/klog/v2"
)

// debugFlagsPath is where the kubelet's enableDebugFlagsHandler serves
// the log verbosity.
const debugFlagsPath = "/debug/flags/v"

// debugFlagsHandler is the kubelet's /debug/flags/v (its
// InstallDebugFlagsHandler, routes.StringFlagPutHandler over
// logs.GlogSetter): a PUT of a number sets the verbosity of klog (the
// client libraries' log) and, through set, hostlet's own; another method
// answers 406. With set nil (enableDebugFlagsHandler: false) it answers
// 405, as the kubelet's disabled endpoint.
func debugFlagsHandler(set func(v uint32)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if set == nil {
			http.Error(w, "flags endpoint is disabled.", http.StatusMethodNotAllowed)
			return
		}
		if r.Method != http.MethodPut {
			writePlainText(w, http.StatusNotAcceptable, "unsupported http method")
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writePlainText(w, http.StatusBadRequest, "error reading request body: "+err.Error())
			return
		}
		val := string(body)
		v, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			writePlainText(w, http.StatusBadRequest, err.Error())
			return
		}
		var level klog.Level
		if err := level.Set(val); err != nil {
			writePlainText(w, http.StatusBadRequest, fmt.Sprintf("failed set klog.logging.verbosity %s: %v", val, err))
			return
		}
		set(uint32(v))
		writePlainText(w, http.StatusOK, "successfully set klog.logging.verbosity to "+val)
	}
}

// writePlainText answers as the apiserver routes' writePlainText.
func writePlainText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}
