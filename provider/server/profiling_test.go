package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProfilingRoutes(t *testing.T) {
	mux := http.NewServeMux()
	attachProfiling(mux, true)
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/cmdline":           "",
		"/debug/pprof/heap?debug=1":      "heap profile",
		"/debug/pprof/block?debug=1":     "contention",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %.200q, want 200 with %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}
