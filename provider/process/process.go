// Package process sets up hostlet's own process as the kubelet sets up its
// own at start: its OOM score adjustment (oomScoreAdj) and its open-file
// limit (maxOpenFiles). Both are inherited by what hostlet runs itself
// (CNI plugins, iptables, journalctl), as the kubelet's children inherit
// them.
package process

import (
	"fmt"
	"os"
	"strconv"

	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Settings are the KubeletConfiguration's fields for the node agent's own
// process.
type Settings struct {
	// OOMScoreAdj is written to /proc/self/oom_score_adj (the kubelet's
	// -999 by default, so the kernel's OOM killer takes a pod before the
	// node agent).
	OOMScoreAdj int32
	// MaxOpenFiles is RLIMIT_NOFILE, soft and hard alike (the kubelet's
	// 1000000 by default).
	MaxOpenFiles int64
}

// procSelf is where the process's OOM score adjustment is written; a
// variable for tests.
var procSelf = "/proc/self"

// setNumFiles sets RLIMIT_NOFILE; a variable for tests.
var setNumFiles = func(n uint64) error {
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Max: n, Cur: n})
}

// Apply applies s in the kubelet's order (the OOM score before the node
// starts, the file limit once it is built: both before any pod runs).
// Neither failure stops the node, as neither stops the kubelet: each is
// logged with the kubelet's message (an unprivileged hostlet may not lower
// its OOM score nor raise its hard limit).
func Apply(s Settings) {
	if err := applyOOMScoreAdj(s.OOMScoreAdj); err != nil {
		log.WithError(err).Info("Failed to ApplyOOMScoreAdj")
	}
	if err := setNumFiles(uint64(s.MaxOpenFiles)); err != nil {
		log.WithError(err).Error("Failed to set rlimit on max file handles")
	}
}

// applyOOMScoreAdj writes the process's oom_score_adj as the kubelet's
// OOMAdjuster does for pid 0 (itself), with its error wording.
func applyOOMScoreAdj(v int32) error {
	path := procSelf + "/oom_score_adj"
	if err := os.WriteFile(path, []byte(strconv.Itoa(int(v))), 0o644); err != nil {
		if os.IsNotExist(err) {
			return os.ErrNotExist
		}
		return fmt.Errorf("failed to apply oom-score-adj to pid 0 (%v)", err)
	}
	return nil
}
