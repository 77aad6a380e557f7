package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type onePod struct{ pod *v1.Pod }

func (p onePod) GetPod(_ context.Context, ns, name string) (*v1.Pod, error) {
	if ns == p.pod.Namespace && name == p.pod.Name {
		return p.pod, nil
	}
	return nil, errors.New("not found")
}

func (p onePod) GetPods(context.Context) ([]*v1.Pod, error) { return []*v1.Pod{p.pod}, nil }

// The uid forms of exec and attach reach the short routes when the UID is
// the pod's, and find nothing otherwise.
func TestStreamRoutesUIDForm(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	s := &server{cfg: Config{Pods: onePod{pod}}}
	var reached string
	h := s.withStreamRoutes(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { reached = r.URL.Path + "?" + r.URL.RawQuery }))
	for path, want := range map[string]string{
		"/attach/ns/p/u1/c?output=1":     "/attach/ns/p/c?output=1",
		"/exec/ns/p/u1/c?command=ls":     "/exec/ns/p/c?command=ls",
		"/attach/ns/p/c?output=1":        "/attach/ns/p/c?output=1",
		"/containerLogs/ns/p/c":          "/containerLogs/ns/p/c?",
		"/attach/ns/p/other/c?output=1":  "",
		"/attach/ns/gone/u1/c?output=1":  "",
		"/portForward/ns/p/u1/c?ports=1": "/portForward/ns/p/u1/c?ports=1",
	} {
		reached = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		if reached != want {
			t.Errorf("%s reached %q, want %q", path, reached, want)
		}
		if want == "" && rec.Code != http.StatusNotFound {
			t.Errorf("%s answered %d, want 404", path, rec.Code)
		}
	}
}
