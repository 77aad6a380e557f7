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
// nodes/proxy. It also samples blocking and lock contention (the kubelet's
// enableContentionProfiling), at rates cheap enough to leave on for a bench.
func attachProfiling(mux *http.ServeMux) {
	goruntime.SetBlockProfileRate(10000) // one event per 10 µs blocked
	goruntime.SetMutexProfileFraction(10)
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
