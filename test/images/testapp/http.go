package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// serveHTTP listens synchronously, so a busy port fails start-up, then serves
// in the background.
func serveHTTP(addr string, h *health) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHTTPHandler(h), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil {
			fmt.Fprintln(os.Stderr, "testapp: http:", err)
			exit(1)
		}
	}()
	return nil
}

func newHTTPHandler(h *health) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		name, err := os.Hostname()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, name)
	})
	mux.HandleFunc("GET /echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.Query().Get("msg"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !h.healthy() {
			http.Error(w, "unhealthy", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/healthz/fail", func(w http.ResponseWriter, r *http.Request) {
		h.set(false)
		fmt.Fprint(w, "unhealthy")
	})
	mux.HandleFunc("/healthz/ok", func(w http.ResponseWriter, r *http.Request) {
		h.set(true)
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("GET /exit", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil {
			http.Error(w, "code: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "exiting %d", code)
		// Deliver the answer before the process goes away.
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		exit(code)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logf("http: %s %s", r.Method, r.URL.RequestURI())
		mux.ServeHTTP(w, r)
	})
}
