package server

import (
	"net/http/httptest"
	"testing"
)

// /configz is the kubelet's: one member, "kubeletconfig", as JSON.
func TestConfigz(t *testing.T) {
	rec := httptest.NewRecorder()
	configzHandler(map[string]any{"maxPods": 30}).ServeHTTP(rec, httptest.NewRequest("GET", "/configz", nil))
	if rec.Code != 200 || rec.Body.String() != `{"kubeletconfig":{"maxPods":30}}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("%d %s %q", rec.Code, rec.Header(), rec.Body)
	}
}
