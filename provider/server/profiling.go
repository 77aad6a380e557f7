package server

import (
	"net/http"
	"net/http/pprof"
	goruntime "runtime"
	"strings"
)

// pprofPath is where the kubelet serves its profiles.
const pprofPath = "/debug/pprof/"

// attachProfiling serves Go's profiles under /debug/pprof/ as the kubelet's
// profiling handler does (enableProfilingHandler): on the kubelet API, so
// behind its authentication and its authorization, where /debug paths need
// nodes/proxy. With contention (enableContentionProfiling) every blocking
// event is sampled for /debug/pprof/block, as the kubelet's rate 1; without
// it the block profile stays empty, as the kubelet's.
func attachProfiling(mux *http.ServeMux, contention bool) {
	if contention {
		goruntime.SetBlockProfileRate(1)
	}
	mux.HandleFunc(pprofPath, func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, pprofPath) {
		case "profile":
			pprof.Profile(w, r)
		case "symbol":
			pprof.Symbol(w, r)
		case "cmdline":
			pprof.Cmdline(w, r)
		case "trace":
			pprof.Trace(w, r)
		default:
			pprof.Index(w, r)
		}
	})
}
