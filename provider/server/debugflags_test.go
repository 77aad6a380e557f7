package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// /debug/flags/v answers as the kubelet's: a PUT of a number sets the
// verbosity, a bad one is 400, another method 406, and the endpoint
// turned off 405.
func TestDebugFlagsHandler(t *testing.T) {
	var got []uint32
	h := debugFlagsHandler(func(v uint32) { got = append(got, v) })
	for _, tc := range []struct {
		method, body string
		code         int
		want         string
	}{
		{http.MethodPut, "4", 200, "successfully set klog.logging.verbosity to 4"},
		{http.MethodPut, "x", 400, `strconv.ParseUint: parsing "x": invalid syntax`},
		{http.MethodGet, "", 406, "unsupported http method"},
	} {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(tc.method, debugFlagsPath, strings.NewReader(tc.body)))
		if rec.Code != tc.code || strings.TrimSpace(rec.Body.String()) != tc.want {
			t.Errorf("%s %q: %d %q, want %d %q", tc.method, tc.body, rec.Code, rec.Body.String(), tc.code, tc.want)
		}
	}
	if len(got) != 1 || got[0] != 4 {
		t.Errorf("set %v, want [4]", got)
	}
	rec := httptest.NewRecorder()
	debugFlagsHandler(nil)(rec, httptest.NewRequest(http.MethodPut, debugFlagsPath, strings.NewReader("4")))
	if rec.Code != http.StatusMethodNotAllowed || strings.TrimSpace(rec.Body.String()) != "flags endpoint is disabled." {
		t.Errorf("disabled: %d %q", rec.Code, rec.Body.String())
	}
}
