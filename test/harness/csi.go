package harness

import (
	"context"
	"os"
	"time"
)

// CSISidecars are upstream's CSI controller sidecars, external-provisioner
// and external-attacher (test/cluster/build.sh csi-provisioner,
// csi-attacher), run as a cluster runs them next to a driver's controller
// service: against the driver's socket and the API server with the admin
// kubeconfig (as their ServiceAccount's RBAC would allow). Shared by the
// e2e CSI tests and the bench's statefulset scenario.
type CSISidecars struct {
	procs []*Process
	// ProvisionerLog and AttacherLog are their logs.
	ProvisionerLog, AttacherLog string
}

// StartCSISidecars builds the two sidecars (cached after the first build;
// cold they take minutes of CPU, so ctx bounds the build too) and starts
// them against socket, their logs named after tag. No leader election (one
// replica each) and no snapshot CRDs: the orphan sweep of snapshot
// finalizers is off.
func (c *Cluster) StartCSISidecars(ctx context.Context, socket, tag string) (*CSISidecars, error) {
	s := &CSISidecars{}
	for _, sc := range []struct {
		name string
		log  *string
		args []string
	}{
		{"csi-provisioner", &s.ProvisionerLog, []string{"--snapshot-orphan-sweep-interval=0", "--extra-create-metadata"}},
		{"csi-attacher", &s.AttacherLog, nil},
	} {
		bin, err := BuildComponent(ctx, c.logf, sc.name)
		if err != nil {
			s.Stop()
			return nil, err
		}
		*sc.log = c.logPath(sc.name + "-" + tag)
		args := append([]string{"--csi-address=" + socket, "--kubeconfig=" + c.adminKubeconfig, "--v=3"}, sc.args...)
		p, err := StartProcess(sc.name, *sc.log, os.Environ(), bin, args...)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	return s, nil
}

// Stop stops both sidecars.
func (s *CSISidecars) Stop() {
	for _, p := range s.procs {
		p.Stop(5 * time.Second)
	}
}
