package devices

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// checkpointName is the file under the device plugin dir holding the
// assignments. It is not the kubelet's kubelet_internal_checkpoint (whose
// format differs) so a host switched between the two never misreads it;
// the start-up cleanup removes sockets only, so it survives.
const checkpointName = "hostlet_device_checkpoint.json"

// checkpoint is what survives a restart of hostlet: which container holds
// which devices (so none is handed out twice) and which resources were
// registered (so their pods are still recognised before the plugin comes
// back).
type checkpoint struct {
	Assignments assignments         `json:"assignments"`
	Registered  map[string][]string `json:"registered"`
}

func readCheckpoint(path string) (checkpoint, error) {
	cp := checkpoint{Assignments: assignments{}, Registered: map[string][]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, err
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return checkpoint{Assignments: assignments{}, Registered: map[string][]string{}}, err
	}
	if cp.Assignments == nil {
		cp.Assignments = assignments{}
	}
	if cp.Registered == nil {
		cp.Registered = map[string][]string{}
	}
	return cp, nil
}

// writeCheckpoint replaces the file atomically: a crash leaves the old one
// or the new one, never half of either.
func writeCheckpoint(path string, cp checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return renameio.WriteFile(path, b, 0o600, renameio.WithTempDir(filepath.Dir(path)))
}
