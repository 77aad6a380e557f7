package podspec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hostlet/hostlet/lifecycle"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The allocation survives a restart, is replaced whole and stays the
// node's own (0600).
func TestAllocationCheckpoint(t *testing.T) {
	r := &Runtime{cfg: Config{RootDir: t.TempDir()}}
	if _, ok := r.LoadAllocation("p"); ok {
		t.Fatal("allocation of a pod never admitted")
	}
	for _, cpu := range []string{"1", "500m"} {
		want := lifecycle.Allocation{"c": {Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}
		if err := r.SaveAllocation("p", want); err != nil {
			t.Fatal(err)
		}
		got, ok := r.LoadAllocation("p")
		if q := got["c"].Requests[v1.ResourceCPU]; !ok || q.Cmp(resource.MustParse(cpu)) != 0 {
			t.Errorf("loaded %v, %v; want cpu %s", got, ok, cpu)
		}
	}
	path := r.allocationPath("p")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, err %v; want 0600", st.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("pod dir holds %v, want the allocation only", entries)
	}
}
