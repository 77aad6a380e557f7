package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// somePods are the incarnations a node runs, the newest of a name last.
type somePods []*v1.Pod

func (ps somePods) GetPod(_ context.Context, ns, name string) (*v1.Pod, error) {
	for i := len(ps) - 1; i >= 0; i-- {
		if p := ps[i]; ns == p.Namespace && name == p.Name {
			return p, nil
		}
	}
	return nil, errors.New("not found")
}

func (ps somePods) GetPodByUID(_ context.Context, uid types.UID) (*v1.Pod, error) {
	for _, p := range ps {
		if p.UID == uid {
			return p, nil
		}
	}
	return nil, errors.New("not found")
}

func (ps somePods) GetPods(context.Context) ([]*v1.Pod, error) { return ps, nil }

// The uid forms of exec and attach reach the short routes when the UID is
// the pod's, and find nothing otherwise.
func TestStreamRoutesUIDForm(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	s := &server{cfg: Config{Pods: somePods{pod}}}
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

// A uid-form URL reaches the container of the incarnation it named, even
// when a newer pod has taken the name; ephemeral containers are found as
// regular and init ones are.
func TestContainerRefByUID(t *testing.T) {
	withStatus := func(uid types.UID, id string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: uid}, Status: v1.PodStatus{
			ContainerStatuses:          []v1.ContainerStatus{{Name: "c", ContainerID: "containerd://c-" + id}},
			EphemeralContainerStatuses: []v1.ContainerStatus{{Name: "dbg", ContainerID: "containerd://dbg-" + id}},
		}}
	}
	s := &server{cfg: Config{Pods: somePods{withStatus("old", "1"), withStatus("new", "2")}}}
	var got []string
	h := s.withStreamRoutes(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		container := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		_, st, err := s.containerRef(r.Context(), "ns", "p", container)
		if err != nil {
			got = append(got, err.Error())
			return
		}
		got = append(got, containerIDOf(st))
	}))
	for _, path := range []string{"/exec/ns/p/old/c", "/exec/ns/p/c", "/attach/ns/p/old/dbg", "/attach/ns/p/dbg"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
	}
	want := []string{"c-1", "c-2", "dbg-1", "dbg-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("containers %q, want %q", got, want)
	}
}
