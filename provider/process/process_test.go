package process

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Apply writes the OOM score adjustment and sets the file limit, soft and
// hard; a failure of either is logged, not returned, as the kubelet's.
func TestApply(t *testing.T) {
	dir := t.TempDir()
	oldProc, oldSet := procSelf, setNumFiles
	defer func() { procSelf, setNumFiles = oldProc, oldSet }()
	procSelf = dir
	var limit uint64
	setNumFiles = func(n uint64) error { limit = n; return nil }
	if err := os.WriteFile(filepath.Join(dir, "oom_score_adj"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	Apply(Settings{OOMScoreAdj: -999, MaxOpenFiles: 1000000})
	b, _ := os.ReadFile(filepath.Join(dir, "oom_score_adj"))
	if string(b) != "-999" || limit != 1000000 {
		t.Errorf("oom_score_adj %q, limit %d", b, limit)
	}

	// Neither failure panics nor stops the other.
	procSelf = filepath.Join(dir, "gone")
	setNumFiles = func(uint64) error { return errors.New("operation not permitted") }
	Apply(Settings{OOMScoreAdj: 10, MaxOpenFiles: 5})
	if err := applyOOMScoreAdj(10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing proc: %v", err)
	}
}
