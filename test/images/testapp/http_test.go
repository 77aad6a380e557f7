package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHealthSwitch(t *testing.T) {
	srv := httptest.NewServer(newHTTPHandler(newHealth(true, time.Now(), 0)))
	defer srv.Close()

	steps := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"POST", "/healthz/fail", 200, "unhealthy"},
		{"GET", "/healthz", 500, "unhealthy\n"},
		{"PUT", "/healthz/ok", 200, "ok"},
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/healthz/fail", 200, "unhealthy"},
		{"GET", "/healthz", 500, "unhealthy\n"},
	}
	for _, s := range steps {
		code, body := get(t, s.method, srv.URL+s.path)
		if code != s.code || body != s.body {
			t.Fatalf("%s %s = %d %q, want %d %q", s.method, s.path, code, body, s.code, s.body)
		}
	}
}

func TestStartsUnhealthy(t *testing.T) {
	srv := httptest.NewServer(newHTTPHandler(newHealth(false, time.Now(), 0)))
	defer srv.Close()
	if code, _ := get(t, "GET", srv.URL+"/healthz"); code != 500 {
		t.Fatalf("got %d, want 500", code)
	}
	get(t, "POST", srv.URL+"/healthz/ok")
	if code, _ := get(t, "GET", srv.URL+"/healthz"); code != 200 {
		t.Fatalf("after /healthz/ok got %d, want 200", code)
	}
}

func TestHealthyAfter(t *testing.T) {
	start := time.Now()
	h := newHealth(true, start, time.Hour)
	now := start.Add(59 * time.Minute)
	h.now = func() time.Time { return now }
	srv := httptest.NewServer(newHTTPHandler(h))
	defer srv.Close()
	if code, _ := get(t, "GET", srv.URL+"/healthz"); code != 500 {
		t.Fatalf("before delay got %d, want 500", code)
	}
	now = start.Add(time.Hour)
	if code, _ := get(t, "GET", srv.URL+"/healthz"); code != 200 {
		t.Fatalf("after delay got %d, want 200", code)
	}
}

func TestEchoHostnameExit(t *testing.T) {
	exited := make(chan int, 1)
	exit = func(code int) { exited <- code }
	defer func() { exit = os.Exit }()

	srv := httptest.NewServer(newHTTPHandler(newHealth(true, time.Now(), 0)))
	defer srv.Close()

	host, _ := os.Hostname()
	if code, body := get(t, "GET", srv.URL+"/"); code != 200 || body != host {
		t.Errorf("GET / = %d %q, want hostname %q", code, body, host)
	}
	if code, body := get(t, "GET", srv.URL+"/echo?msg=hello%20there"); code != 200 || body != "hello there" {
		t.Errorf("GET /echo = %d %q", code, body)
	}
	if code, _ := get(t, "GET", srv.URL+"/missing"); code != 404 {
		t.Errorf("GET /missing = %d, want 404", code)
	}
	if code, _ := get(t, "GET", srv.URL+"/exit?code=x"); code != 400 {
		t.Errorf("GET /exit?code=x = %d, want 400", code)
	}
	if code, body := get(t, "GET", srv.URL+"/exit?code=42"); code != 200 || body != "exiting 42" {
		t.Errorf("GET /exit = %d %q", code, body)
	}
	select {
	case c := <-exited:
		if c != 42 {
			t.Errorf("exit code %d, want 42", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
}
