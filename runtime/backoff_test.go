package runtime

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
)

// The crash-loop back-off recorded on a container counts in the boot it
// was recorded in only: a restarted hostlet keeps it, a rebooted host
// starts the container at once, as the kubelet (back-off in memory) does.
// A record of a hostlet from before the boot was recorded still counts.
func TestBackoffKeptWithinBootOnly(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(f, []byte("3f1e9c2a-boot-one\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	boot := readBootID(f)
	if boot != "3f1e9c2a-boot-one" {
		t.Fatalf("boot ID %q", boot)
	}
	if got := readBootID(filepath.Join(dir, "missing")); got != "" {
		t.Fatalf("boot ID without the file %q", got)
	}
	info := func(backoff string) containers.Container {
		return containers.Container{ID: "c1", Labels: map[string]string{labelBackoff: backoff}}
	}
	recorded := info(backoffLabel(20*time.Second, 40*time.Second, boot))
	for _, tc := range []struct {
		name          string
		info          containers.Container
		boot          string
		applied, next time.Duration
	}{
		{"same boot (hostlet restarted)", recorded, boot, 20 * time.Second, 40 * time.Second},
		{"another boot (host rebooted)", recorded, "7b0d-boot-two", 0, 0},
		{"no boot recorded (older hostlet)", info("10s/20s"), boot, 10 * time.Second, 20 * time.Second},
		{"none", containers.Container{ID: "c1"}, boot, 0, 0},
		{"boot ID unknown now and then", info(backoffLabel(time.Second, 2*time.Second, "")), "", time.Second, 2 * time.Second},
	} {
		st := statusFromInfo(tc.info, tc.boot)
		if st.BackoffApplied != tc.applied || st.BackoffNext != tc.next {
			t.Errorf("%s: back-off %v/%v, want %v/%v", tc.name, st.BackoffApplied, st.BackoffNext, tc.applied, tc.next)
		}
	}
}
