package main

import (
	"os"

	"github.com/hostlet/hostlet/provider/mirror"
	"github.com/hostlet/hostlet/runtime"
)

// newRuntime connects to containerd; eventStream, if set, is told whether
// its event stream is up.
// peers, if set, is the registry mirror pulls try first.
func newRuntime(o *options, nodeIP string, eventStream func(error), peers *mirror.Mirror) (*runtime.Runtime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cgroups, err := o.cgroupConfig()
	if err != nil {
		return nil, err
	}
	cfg := runtime.Config{
		Cgroups:  cgroups,
		Endpoint: o.runtimeEndpoint, Namespace: o.containerdNS, RootDir: o.rootDir,
		Executable: self, NodeIP: nodeIP,
		CNIConfDir: o.cniConfDir, CNIBinDirs: o.cniBinDirs, CNICacheDir: o.cniCacheDir,
		CNIDefaultBridge:  o.cniDefaultBridge,
		RegistryConfigDir: o.registryConfigDir,
		Snapshotter:       o.imageSnapshotter,
		SnapshotterCreds:  o.stargzCredentials,
		CDISpecDirs:       o.cdiSpecDirs,
		PodLogsDir:        o.podLogsDir,
		ContainerLogsDir:  o.containerLogsDir,
		EventStream:       eventStream,
		TracerProvider:    o.tracer,
	}
	if peers != nil {
		cfg.Mirror = peers
	}
	return runtime.New(cfg)
}
