package dra

import (
	"encoding/json"
	"errors"
	"os"

	"github.com/google/renameio/v2"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// CheckpointName is the file under the root dir holding what was prepared
// for which pod, as the kubelet's dra_manager_state does (not its name: the
// format differs). Without it a restart forgot the claims of running pods:
// a driver not back yet when they were adopted left them never unprepared.
const CheckpointName = "hostlet_dra_checkpoint.json"

// checkpointClaim is one prepared claim as written down; the claim object
// says which drivers prepared it and is what unprepare names.
type checkpointClaim struct {
	Claim   *resourceapi.ResourceClaim `json:"claim"`
	Devices []checkpointDevice         `json:"devices"`
}

type checkpointDevice struct {
	RequestNames []string `json:"requestNames,omitempty"`
	Pool         string   `json:"pool,omitempty"`
	Device       string   `json:"device,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

// checkpointFile is the whole file: the claims by pod UID and claim name,
// and the pods gone whose claims a driver has not unprepared yet.
type checkpointFile struct {
	Pods      map[types.UID]map[string]checkpointClaim `json:"pods"`
	Unprepare []types.UID                              `json:"unpreparePending,omitempty"`
}

// load reads the checkpoint; a missing file is an empty one.
func load(path string) (map[types.UID]map[string]prepared, map[types.UID]bool, error) {
	pods, gone := map[types.UID]map[string]prepared{}, map[types.UID]bool{}
	if path == "" {
		return pods, gone, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return pods, gone, nil
	}
	if err != nil {
		return pods, gone, err
	}
	var cp checkpointFile
	if err := json.Unmarshal(b, &cp); err != nil {
		return pods, gone, err
	}
	for _, uid := range cp.Unprepare {
		gone[uid] = true
	}
	for uid, claims := range cp.Pods {
		pods[uid] = map[string]prepared{}
		for name, c := range claims {
			p := prepared{claim: c.Claim}
			for _, d := range c.Devices {
				p.devices = append(p.devices, &drapb.Device{RequestNames: d.RequestNames, PoolName: d.Pool, DeviceName: d.Device, CdiDeviceIds: d.CDIDeviceIDs})
			}
			pods[uid][name] = p
		}
	}
	return pods, gone, nil
}

// save writes pods down atomically (a crash leaves the old file or the
// new one). Called with m.mu held, so writes follow the map's order.
func save(path string, pods map[types.UID]map[string]prepared, gone map[types.UID]bool) error {
	if path == "" {
		return nil
	}
	cp := checkpointFile{Pods: map[types.UID]map[string]checkpointClaim{}}
	for uid := range gone {
		cp.Unprepare = append(cp.Unprepare, uid)
	}
	for uid, claims := range pods {
		cp.Pods[uid] = map[string]checkpointClaim{}
		for name, p := range claims {
			c := checkpointClaim{Claim: p.claim}
			for _, d := range p.devices {
				c.Devices = append(c.Devices, checkpointDevice{RequestNames: d.RequestNames, Pool: d.PoolName, Device: d.DeviceName, CDIDeviceIDs: d.CdiDeviceIds})
			}
			cp.Pods[uid][name] = c
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return renameio.WriteFile(path, b, 0o600)
}
