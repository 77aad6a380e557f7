package dra

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

func TestClaimName(t *testing.T) {
	direct, generated := "direct", "pod-gen-abc"
	pod := &v1.Pod{Status: v1.PodStatus{ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "tmpl", ResourceClaimName: &generated}}}}
	if n, err := claimName(pod, &v1.PodResourceClaim{Name: "a", ResourceClaimName: &direct}); err != nil || n != direct {
		t.Errorf("direct: %q %v", n, err)
	}
	if n, err := claimName(pod, &v1.PodResourceClaim{Name: "tmpl"}); err != nil || n != generated {
		t.Errorf("from a template: %q %v", n, err)
	}
	if _, err := claimName(pod, &v1.PodResourceClaim{Name: "other"}); err == nil {
		t.Error("a template claim not created yet should wait")
	}
}

// A container gets the CDI devices of the claims it names, and of a
// claim's request only those of that request (and its subrequests).
func TestContainerCDI(t *testing.T) {
	m := New(Config{})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p"}}
	m.pods["p"] = map[string]prepared{
		"gpu": {claim: &resourceapi.ResourceClaim{}, devices: []*drapb.Device{
			{RequestNames: []string{"big"}, CdiDeviceIds: []string{"v.com/c=0"}},
			{RequestNames: []string{"small/sub"}, CdiDeviceIds: []string{"v.com/c=1"}},
		}},
	}
	for _, tc := range []struct {
		claims []v1.ResourceClaim
		want   []string
	}{
		{[]v1.ResourceClaim{{Name: "gpu"}}, []string{"v.com/c=0", "v.com/c=1"}},
		{[]v1.ResourceClaim{{Name: "gpu", Request: "small"}}, []string{"v.com/c=1"}},
		{[]v1.ResourceClaim{{Name: "other"}}, nil},
		{nil, nil},
	} {
		c := &v1.Container{Resources: v1.ResourceRequirements{Claims: tc.claims}}
		if got := m.ContainerCDI(pod, c); !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.claims, got, tc.want)
		}
	}
}
